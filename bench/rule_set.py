"""Ten argument rules for the benches: conditions of the kinds docs/rules.md shows, none holding for a clock call.

None matches `core__get_current_time` with `{}` or `{"timezone": "UTC"}`, so a call evaluates all ten
(the costliest case for a call that then runs).
"""

from __future__ import annotations

TEN_CONDITIONS = (
    'has(args.timezone) && args.timezone == "Europe/Paris"',
    'has(args.timezone) && args.timezone.startsWith("America/")',
    'has(args.zone) && args.zone == "x"',
    'has(args.timezone) && args.timezone.matches("^Asia/[A-Za-z_]+$")',
    'tool.effect == "external_side_effect"',
    '"danger" in tool.tags',
    'caller.tenant == "other"',
    "subject.present && subject.id == 'user:1'",
    "connection.present && connection.personal",
    "has(args.timezone) && size(args.timezone) > 64",
)
