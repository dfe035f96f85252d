"""Upstream MCP tools run only through the runner: only the MCP adapter calls the SDK's call_tool.

The MCP host's relay is the one other caller: it passes on, to a stdio child, a call that a
worker's runner already made through the adapter (its endpoint answers only Toolgate's token).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.arch.test_architecture import PROJECT_ROOT, detect, detect_in, offences, python_files

CALL_TOOL_ALLOWED_IN = PROJECT_ROOT / "gateway" / "upstream" / "client.py"
HOST_RELAY = PROJECT_ROOT / "gateway" / "host" / "children.py"
# Tests and benchmarks act as MCP clients of Toolgate or of upstreams; product code never may.
NOT_PRODUCT_CODE = (PROJECT_ROOT / "tests", PROJECT_ROOT / "bench")
SDK_CALL_NAMES = frozenset({"call_tool"})


def call_tool_calls(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """Calls of `<anything>.call_tool(...)`, and of a CallToolRequest built by hand (the SDK's bypass)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in SDK_CALL_NAMES:
            yield node.lineno, ast.unparse(func)
        elif isinstance(func, ast.Name) and func.id in SDK_CALL_NAMES:
            yield node.lineno, func.id
        elif ast.unparse(func).endswith("CallToolRequest"):
            yield node.lineno, ast.unparse(func)


def test_only_the_mcp_adapter_calls_call_tool() -> None:
    files = [
        path for path in python_files(PROJECT_ROOT) if not any(path.is_relative_to(root) for root in NOT_PRODUCT_CODE)
    ]
    assert CALL_TOOL_ALLOWED_IN in files

    found = offences(
        [path for path in files if path not in (CALL_TOOL_ALLOWED_IN, HOST_RELAY)], call_tool_calls, "calls"
    )

    assert found == []
    assert detect_in(CALL_TOOL_ALLOWED_IN, call_tool_calls) != []  # the detector does see the real call
    assert [name for _line, name in detect_in(HOST_RELAY, call_tool_calls)] == ["client.call_tool"]


def test_call_tool_detector_flags_sdk_calls_and_hand_built_requests() -> None:
    source = (
        "result = await client.call_tool('add', {})\n"
        "await session.call_tool(name, args)\n"
        "req = types.CallToolRequest(params=p)\n"
        "await runner.exec(tool_id, args, ctx)\n"
        "call_tool('x')\n"
    )

    assert detect(call_tool_calls, source, PROJECT_ROOT / "example.py") == [
        (1, "client.call_tool"),
        (2, "session.call_tool"),
        (3, "types.CallToolRequest"),
        (5, "call_tool"),
    ]
