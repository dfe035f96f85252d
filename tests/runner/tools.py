"""Tool definitions made for the runner's tests: each one exercises one stage."""

from __future__ import annotations

import asyncio
import threading
import time

from pydantic import Field

from runner.contracts import ToolArgs, ToolContract, ToolDefinition, ToolOutput
from runner.errors import ToolError
from runner.redaction import CONTENT_ALLOWLIST
from runner.types import ToolContent, ToolEffect

SECRET_IN_EXCEPTION = "sk-live-CANARY-7f3a"


class EchoArgs(ToolArgs):
    text: str = Field(max_length=100)
    repeat: int = Field(default=1, ge=1, le=10_000)


class EchoOut(ToolOutput):
    text: str


class SleepArgs(ToolArgs):
    ms: int


class Nothing(ToolArgs):
    pass


class Anything(ToolOutput):
    pass


def _contract(name: str, args: type[ToolArgs], out: type[ToolOutput], **extra) -> ToolContract:
    extra.setdefault("redaction_allowlist", tuple(out.model_fields))
    return ToolContract(
        name=name,
        description=f"test tool {name}",
        input_model=args,
        output_model=out,
        effect=extra.pop("effect", ToolEffect.READ_ONLY),
        **extra,
    )


async def _echo(args: EchoArgs, ctx, caps) -> dict:
    return {"text": args.text * args.repeat, "internal_note": "stripped by redaction"}


async def _sleep(args: SleepArgs, ctx, caps) -> EchoOut:
    await asyncio.sleep(args.ms / 1000)
    return EchoOut(text="done")


async def _block(args: SleepArgs, ctx, caps) -> EchoOut:
    time.sleep(args.ms / 1000)  # a badly written tool: blocks the event loop, ignores cancellation
    return EchoOut(text="done")


async def _where(args: Nothing, ctx, caps) -> EchoOut:
    return EchoOut(text=str(threading.get_ident()))


def _where_sync(args: Nothing, ctx, caps) -> EchoOut:
    return EchoOut(text=str(threading.get_ident()))


def _slow_sync(args: SleepArgs, ctx, caps) -> EchoOut:
    time.sleep(args.ms / 1000)  # a plain-function tool that does not return at once
    return EchoOut(text="done")


async def _boom(args: Nothing, ctx, caps) -> EchoOut:
    raise RuntimeError(f"database password is {SECRET_IN_EXCEPTION}")


async def _bad_output(args: Nothing, ctx, caps) -> dict:
    return {"text": 42}


async def _token_echo(args: Nothing, ctx, caps) -> dict:
    return {"text": "hello", "authorization": caps.require_auth().headers()["Authorization"]}


ECHO = ToolDefinition(_contract("test__echo", EchoArgs, EchoOut), _echo)
SIDE_EFFECT = ToolDefinition(_contract("test__send", EchoArgs, EchoOut, effect=ToolEffect.EXTERNAL_SIDE_EFFECT), _echo)
SLEEP = ToolDefinition(_contract("test__sleep", SleepArgs, EchoOut, default_timeout_ms=5_000), _sleep)
BLOCK = ToolDefinition(_contract("test__block", SleepArgs, EchoOut, default_timeout_ms=200), _block)
WHERE = ToolDefinition(_contract("test__where", Nothing, EchoOut), _where)
WHERE_SYNC = ToolDefinition(_contract("test__where_sync", Nothing, EchoOut), _where_sync)
SLOW_SYNC = ToolDefinition(_contract("test__slow_sync", SleepArgs, EchoOut, default_timeout_ms=100), _slow_sync)
BOOM = ToolDefinition(_contract("test__boom", Nothing, EchoOut), _boom)
BAD_OUTPUT = ToolDefinition(_contract("test__bad_output", Nothing, EchoOut), _bad_output)
NO_ALLOWLIST = ToolDefinition(_contract("test__no_allowlist", EchoArgs, EchoOut, redaction_allowlist=None), _echo)
NEEDS_CONNECTION = ToolDefinition(
    _contract(
        "test__connected",
        Nothing,
        EchoOut,
        requires_connection=True,
        provider="github",
        capabilities=frozenset({"auth"}),
    ),
    _token_echo,
)

ALL = (ECHO, SIDE_EFFECT, SLEEP, BLOCK, BOOM, BAD_OUTPUT, NO_ALLOWLIST, NEEDS_CONNECTION)


# --- tools that answer content blocks, or an error meant for the model -----------------------

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


async def _refuse(args: EchoArgs, ctx, caps) -> EchoOut:
    raise ToolError("no city of that name; send one of: Paris, Oslo")


async def _refuse_with_token(args: Nothing, ctx, caps) -> EchoOut:
    raise ToolError(f"the server said: {caps.require_auth().headers()['Authorization']}")


async def _blocks(args: EchoArgs, ctx, caps) -> ToolContent:
    return ToolContent(
        content=(
            {"type": "text", "text": args.text * args.repeat},
            {"type": "image", "data": PIXEL, "mimeType": "image/png", "_meta": {"unreviewed": True}},
        )
    )


REFUSE = ToolDefinition(_contract("test__refuse", EchoArgs, EchoOut), _refuse)
REFUSE_WITH_TOKEN = ToolDefinition(
    _contract(
        "test__refuse_connected",
        Nothing,
        EchoOut,
        requires_connection=True,
        provider="github",
        capabilities=frozenset({"auth"}),
    ),
    _refuse_with_token,
)


class ContentOut(ToolOutput):
    content: list[dict]


BLOCKS = ToolDefinition(_contract("test__blocks", EchoArgs, ContentOut, redaction_allowlist=CONTENT_ALLOWLIST), _blocks)
CONTENT_TOOLS = (REFUSE, REFUSE_WITH_TOKEN, BLOCKS)
