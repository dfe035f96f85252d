"""core__get_current_time: the current time in an IANA timezone."""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import Field, field_validator

from runner.capabilities import ToolCapabilities
from runner.contracts import ToolArgs, ToolContract, ToolDefinition, ToolOutput
from runner.types import ConsequenceLevel, ToolEffect, ToolInvocationContext

_ZONES = frozenset(available_timezones())


class GetCurrentTimeArgs(ToolArgs):
    timezone: str = Field(default="UTC", max_length=64, description="IANA timezone name, e.g. Europe/Paris")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        # Checked against the tz database's list: ZoneInfo() alone would also accept file paths.
        if value != "UTC" and value not in _ZONES:
            raise ValueError("unknown IANA time zone; send a tz database name such as Europe/Paris or UTC")
        return value


class GetCurrentTimeResult(ToolOutput):
    iso: str
    epoch_ms: int
    timezone: str


def execute(args: GetCurrentTimeArgs, ctx: ToolInvocationContext, caps: ToolCapabilities) -> GetCurrentTimeResult:
    try:
        now = caps.clock.now().astimezone(ZoneInfo(args.timezone))
    except ZoneInfoNotFoundError:  # listed but missing from this machine's tz data
        now = caps.clock.now()
    return GetCurrentTimeResult(iso=now.isoformat(), epoch_ms=int(now.timestamp() * 1000), timezone=args.timezone)


TOOL = ToolDefinition(
    contract=ToolContract(
        name="core__get_current_time",
        description="Get the current date and time, optionally in a given IANA timezone.",
        input_model=GetCurrentTimeArgs,
        output_model=GetCurrentTimeResult,
        effect=ToolEffect.READ_ONLY,
        consequence_level=ConsequenceLevel.LOW,
        requires_confirmation=False,
        tags=("time",),
        version="1.0.0",
        redaction_allowlist=("iso", "epoch_ms", "timezone"),
        capabilities=frozenset({"clock"}),
    ),
    execute=execute,
)
