"""No code path sets a call's subject from request data.

The subject of a call (`ToolInvocationContext.subject_id`) is written in exactly
one place: the runner's authorization stage, from the authorization port's
answer. Interfaces hand over the subject *token* only, and the one function that
builds a context from a request derives `delegation_id` from the token's digest
(`delegation_for_token`). These rules are checked on the parsed source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from tests.arch.test_architecture import PROJECT_ROOT, python_files

APP_DIRS = (
    "runner",
    "changes_app",
    "policies_app",
    "tools_app",
    "gateway",
    "identity_app",
    "connections_app",
    "config",
)
SUBJECT_SET_IN = PROJECT_ROOT / "runner" / "pipeline.py"
CONTEXT_BUILT_FROM_REQUESTS_IN = PROJECT_ROOT / "tools_app" / "services.py"


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _names_in(node: ast.AST) -> set[str]:
    return {
        n.attr if isinstance(n, ast.Attribute) else n.id
        for n in ast.walk(node)
        if isinstance(n, (ast.Name, ast.Attribute))
    }


def subject_writes(tree: ast.Module, path: Path) -> Iterable[tuple[int, str]]:
    """Every place that gives a context a subject_id, and whether it may."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in {"ToolInvocationContext", "replace"}:
            for keyword in node.keywords:
                if keyword.arg != "subject_id":
                    continue
                from_port = path == SUBJECT_SET_IN and _names_in(keyword.value) == {"verdict", "subject_id"}
                if not from_port:
                    yield node.lineno, f"{_callee(node)}(subject_id=...) outside the authorization stage"
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "subject_id":
                    yield node.lineno, "assigns .subject_id"
        if (
            isinstance(node, ast.Call)
            and _callee(node) in {"setattr", "__setattr__"}
            and any(isinstance(arg, ast.Constant) and arg.value == "subject_id" for arg in node.args)
        ):
            yield node.lineno, "setattr(..., 'subject_id', ...)"


# The two digests that may name a call's delegation: a subject token's (delegation_for_token), and a
# signed-in MCP client's access token's (caller_for_access_token puts it on the Caller, nowhere else).
DELEGATION_RESOLVERS = frozenset({"delegation_for_token", "_delegation_of"})
CALLER_DELEGATION_SET_IN = PROJECT_ROOT / "signin" / "services.py"


def delegation_writes(tree: ast.Module, path: Path) -> Iterable[tuple[int, str]]:
    """A context's delegation_id comes only from a token's digest, in the one context builder."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _callee(node) in {"ToolInvocationContext", "replace"}:
            for keyword in node.keywords:
                if keyword.arg != "delegation_id":
                    continue
                if path != CONTEXT_BUILT_FROM_REQUESTS_IN or not DELEGATION_RESOLVERS & _names_in(keyword.value):
                    yield node.lineno, f"{_callee(node)}(delegation_id=...) not from delegation_for_token"
        if isinstance(node, ast.Call) and _callee(node) == "Caller":
            for keyword in node.keywords:
                if keyword.arg == "delegation_id" and path != CALLER_DELEGATION_SET_IN:
                    yield node.lineno, "Caller(delegation_id=...) outside caller_for_access_token"


def _offences(detector) -> list[str]:
    found = []
    for directory in APP_DIRS:
        for path in python_files(PROJECT_ROOT / directory):
            tree = ast.parse(path.read_text(), filename=str(path))
            found += [f"{path.relative_to(PROJECT_ROOT)}:{line}: {what}" for line, what in detector(tree, path)]
    return found


def test_only_the_authorization_stage_sets_a_calls_subject():
    assert _offences(subject_writes) == []


def test_only_the_token_digest_names_a_calls_delegation():
    assert _offences(delegation_writes) == []


def test_the_rules_catch_a_subject_taken_from_a_request():
    offending = ast.parse(
        "ctx = ToolInvocationContext(run_id='', tool_call_id='', tenant_id='', actor_id='',"
        " subject_id=request.data['subject_id'])\n"
        "ctx2 = replace(ctx, subject_id=data.get('subject'))\n"
        "call.ctx.subject_id = request.headers['X-Subject']\n"
        "ctx3 = replace(ctx, delegation_id=request.data['delegation'])\n"
    )
    anywhere = PROJECT_ROOT / "tools_app" / "api" / "views.py"
    assert sorted(line for line, _ in subject_writes(offending, anywhere)) == [1, 2, 3]
    assert [line for line, _ in delegation_writes(offending, anywhere)] == [4]
    # even in the stage's own module, only the port's verdict may be the source
    assert sorted(line for line, _ in subject_writes(offending, SUBJECT_SET_IN)) == [1, 2, 3]


def test_the_interfaces_pass_the_token_on_and_nothing_else():
    """The header and the MCP _meta key are read in one place each, and only handed on as `subject_token`."""
    readers = {}
    for directory in APP_DIRS:
        for path in python_files(PROJECT_ROOT / directory):
            text = path.read_text()
            if "HTTP_X_TOOLGATE_SUBJECT" in text or "SUBJECT_META_KEY" in text:
                readers[str(path.relative_to(PROJECT_ROOT))] = text
    assert set(readers) == {"policies_app/authentication.py", "gateway/inbound/views.py"}
