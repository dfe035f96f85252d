"""The former name of `mcp_upstream`, kept so runbooks and scripts written with it keep working.

It takes the same arguments and does the same thing, after one line on stderr
naming the new command (stdout stays what scripts parse).
"""

from __future__ import annotations

from gateway.management.commands import mcp_upstream

DEPRECATION = "mcp_server is deprecated: it is now called mcp_upstream (same arguments)."


class Command(mcp_upstream.Command):
    help = f"Deprecated alias of mcp_upstream. {mcp_upstream.Command.help}"

    def handle(self, *args: str, **options: object) -> None:
        self.stderr.write(DEPRECATION)
        super().handle(*args, **options)
