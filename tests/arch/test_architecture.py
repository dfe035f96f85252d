"""Static architecture rules, checked on the source tree with `ast`.

Each rule has a small detector that works on parsed source, so it can be
proved against a snippet, and a test that runs it over the real files and
reports every offence as `path:line: what`.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from runner.types import ToolInvocationContext

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RUNNER_DIR = PROJECT_ROOT / "runner"
TOOLS_DIR = PROJECT_ROOT / "tools_app" / "tools"
ARCH_TESTS_DIR = PROJECT_ROOT / "tests" / "arch"
EXECUTE_ALLOWED_IN = PROJECT_ROOT / "runner" / "pipeline.py"

# Hidden directories (.venv, .git, caches) are skipped as well.
SKIPPED_DIRS = frozenset({"migrations", "__pycache__", "node_modules", "staticfiles", "var"})

# httptools (llhttp) parses the answers on runner/http1's keep-alive pools.
RUNNER_THIRD_PARTY = frozenset({"runner", "pydantic", "pydantic_core", "httpx2", "httptools"})
TOOL_FORBIDDEN_MODULES = (
    "os",
    "environ",
    "django",
    "config",
    "httpx",
    "httpx2",
    "requests",
    "urllib.request",
    "http.client",
    "socket",
    "aiohttp",
    "subprocess",
)
ENV_READERS = frozenset({"environ", "environb", "getenv", "getenvb"})
DB_CURSOR_NAMES = frozenset({"cursor", "cur", "connection", "conn"})
SECRET_LITERAL = re.compile(r"authorization|bearer ", re.IGNORECASE)
SECRET_SHAPED = re.compile(r"token|secret|password|passwd|key|authorization|header|credential|cookie", re.IGNORECASE)

# A detector reports (line, detail) for each offence in one parsed file.
Detector = Callable[[ast.Module, Path], Iterable[tuple[int, str]]]


# --- source walking --------------------------------------------------------------------


def python_files(root: Path) -> list[Path]:
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(name for name in subdirs if name not in SKIPPED_DIRS and not name.startswith("."))
        found.extend(Path(directory) / name for name in sorted(files) if name.endswith(".py"))
    return found


def relative(path: Path) -> Path:
    return path.relative_to(PROJECT_ROOT)


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def offences(paths: list[Path], detector: Detector, what: str) -> list[str]:
    """`path:line: what detail` for every offence the detector finds in each file."""
    return [f"{relative(path)}:{line}: {what} {detail}" for path in paths for line, detail in detect_in(path, detector)]


def detect_in(path: Path, detector: Detector) -> list[tuple[int, str]]:
    return sorted(detector(parse(path), path))


def detect(detector: Detector, source: str, path: Path) -> list[tuple[int, str]]:
    """Run a detector on a snippet, as if it were the file at `path`."""
    return sorted(detector(ast.parse(source), path))


# --- detectors ---------------------------------------------------------------------------


def module_parts(path: Path) -> tuple[str, ...]:
    """`runner/wire/openai.py` -> ("runner", "wire", "openai")."""
    return relative(path).with_suffix("").parts


def imported_modules(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """Every module an import names, relative imports resolved (`from urllib import request` gives both)."""
    package = module_parts(path)[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(node, package)
            if base:  # empty for `from .. import x` that climbs to the project root
                yield node.lineno, base
            for alias in node.names:
                if alias.name != "*":
                    yield node.lineno, f"{base}.{alias.name}" if base else alias.name
        elif dynamic_import(node):
            yield node.lineno, "<dynamic import>"


def resolve_from(node: ast.ImportFrom, package: tuple[str, ...]) -> str:
    if node.level == 0:
        return node.module or ""
    if node.level - 1 > len(package):
        return "<beyond the project root>"
    parent = package[: len(package) - (node.level - 1)]
    return ".".join((*parent, *([node.module] if node.module else [])))


def dynamic_import(node: ast.AST) -> bool:
    """`importlib.import_module(...)` or `__import__(...)`, which a static import rule cannot see through."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id in {"__import__", "import_module"}) or (
        isinstance(func, ast.Attribute) and func.attr == "import_module"
    )


def root_of(module: str) -> str:
    return module.split(".", 1)[0]


def matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(f"{prefix}.")


def framework_imports(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    for line, module in imported_modules(tree, path):
        root = root_of(module)
        app = root.endswith("_app") or (root in LAYER_OF and root != "runner")
        if root in {"django", "config"} or app or module.startswith("<"):
            yield line, module


def non_runner_dependencies(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    for line, module in imported_modules(tree, path):
        root = root_of(module)
        if root not in sys.stdlib_module_names and root not in RUNNER_THIRD_PARTY:
            yield line, module


def forbidden_tool_imports(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    for line, module in imported_modules(tree, path):
        if module.startswith("<") or any(matches(module, forbidden) for forbidden in TOOL_FORBIDDEN_MODULES):
            yield line, module


def env_reads(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ENV_READERS:
            yield node.lineno, ast.unparse(node)
        elif isinstance(node, ast.Name) and node.id in ENV_READERS:
            yield node.lineno, node.id


def execute_calls(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """Calls of something named `execute`, except on DB cursors (`cursor.execute("select 1")`)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "execute":
            yield node.lineno, ast.unparse(func)
        elif isinstance(func, ast.Attribute) and func.attr == "execute":
            receiver_is_cursor = isinstance(func.value, ast.Name) and func.value.id in DB_CURSOR_NAMES
            if not receiver_is_cursor:
                yield node.lineno, ast.unparse(func)


def docstring_nodes(tree: ast.Module) -> set[ast.AST]:
    owners = [
        tree,
        *(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)),
    ]
    return {
        owner.body[0].value
        for owner in owners
        if owner.body and isinstance(owner.body[0], ast.Expr) and isinstance(owner.body[0].value, ast.Constant)
    }


def secret_literals(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """String literals that build an auth header by hand (docstrings may talk about auth)."""
    docstrings = docstring_nodes(tree)
    for node in ast.walk(tree):
        is_literal = isinstance(node, ast.Constant) and isinstance(node.value, str) and node not in docstrings
        if is_literal and SECRET_LITERAL.search(node.value):
            yield node.lineno, repr(node.value)


def secret_shaped_fields(cls: type) -> list[str]:
    return [field.name for field in dataclasses.fields(cls) if SECRET_SHAPED.search(field.name)]


# --- the runner stays framework-free ----------------------------------------------------


def test_runner_imports_no_django_config_or_app_package() -> None:
    runner_files = python_files(RUNNER_DIR)
    assert RUNNER_DIR / "pipeline.py" in runner_files

    assert offences(runner_files, framework_imports, "runner imports") == []


def test_runner_depends_only_on_stdlib_pydantic_httpx2_and_httptools() -> None:
    assert offences(python_files(RUNNER_DIR), non_runner_dependencies, "runner depends on") == []


def test_import_detector_resolves_relative_and_dynamic_imports() -> None:
    # given a module two levels deep in runner/
    path = RUNNER_DIR / "wire" / "example.py"
    source = (
        "from . import openai\n"
        "from ..schema import to_tool_spec\n"
        "from ...config import settings\n"
        "import django.conf\n"
        "from tools_app import registry\n"
        "importlib.import_module('django')\n"
    )

    # when
    found = detect(framework_imports, source, path)

    # then
    assert found == [
        (3, "config"),
        (3, "config.settings"),
        (4, "django.conf"),
        (5, "tools_app"),
        (5, "tools_app.registry"),
        (6, "<dynamic import>"),
    ]
    assert detect(non_runner_dependencies, "from . import openai\nfrom ..schema import x\n", path) == []
    assert detect(framework_imports, "from .. import config\n", RUNNER_DIR / "example.py") == [(1, "config")]


# --- tool modules reach the world only through capabilities -----------------------------


def tool_files() -> list[Path]:
    files = python_files(TOOLS_DIR)
    assert TOOLS_DIR / "github.py" in files
    return files


def test_tool_modules_import_no_env_settings_or_http_client() -> None:
    assert offences(tool_files(), forbidden_tool_imports, "tool module imports") == []


def test_tool_modules_read_no_environment() -> None:
    assert offences(tool_files(), env_reads, "tool module reads") == []


def test_tool_modules_build_no_auth_header_by_hand() -> None:
    assert offences(tool_files(), secret_literals, "tool module has the literal") == []


def test_tool_detectors_flag_what_they_forbid() -> None:
    path = TOOLS_DIR / "example.py"
    source = (
        '"""Docstrings may say Authorization."""\n'
        "import os\n"
        "from urllib import request\n"
        "from urllib.parse import quote\n"
        "from http.client import HTTPSConnection\n"
        "token = os.environ['GITHUB_TOKEN'] or getenv('X')\n"
        "headers = {'Authorization': 'Bearer ' + token}\n"
    )

    assert detect(forbidden_tool_imports, source, path) == [
        (2, "os"),
        (3, "urllib.request"),
        (5, "http.client"),
        (5, "http.client.HTTPSConnection"),
    ]
    assert detect(env_reads, source, path) == [(6, "getenv"), (6, "os.environ")]
    assert detect(secret_literals, source, path) == [(7, "'Authorization'"), (7, "'Bearer '")]


# --- the invocation context holds references, never secrets -----------------------------


def test_invocation_context_has_no_secret_shaped_field() -> None:
    assert secret_shaped_fields(ToolInvocationContext) == []


def test_secret_shaped_field_check_flags_a_leaky_dataclass() -> None:
    @dataclasses.dataclass
    class LeakyContext:
        run_id: str
        api_key: str
        auth_headers: dict[str, str]

    assert secret_shaped_fields(LeakyContext) == ["api_key", "auth_headers"]


# --- only the pipeline executes tools ---------------------------------------------------


def test_only_the_pipeline_calls_execute() -> None:
    # given every Python file of the project, except this rule's own tests
    files = [path for path in python_files(PROJECT_ROOT) if not path.is_relative_to(ARCH_TESTS_DIR)]
    assert EXECUTE_ALLOWED_IN in files

    # when
    found = offences([path for path in files if path != EXECUTE_ALLOWED_IN], execute_calls, "calls")

    # then
    assert found == []
    assert detect_in(EXECUTE_ALLOWED_IN, execute_calls) != []  # the detector does see the real call


def test_execute_detector_flags_tool_calls_and_ignores_db_cursors() -> None:
    source = (
        "output = await tool.definition.execute(args, ctx, caps)\n"
        'cursor.execute("select 1")\n'
        "conn.execute('select 1')\n"
        "execute(args, ctx, caps)\n"
        "self.cursor.execute('select 1')\n"
    )

    assert detect(execute_calls, source, PROJECT_ROOT / "example.py") == [
        (1, "tool.definition.execute"),
        (4, "execute"),
        (5, "self.cursor.execute"),
    ]


# --- the change log is below every domain app: every app may write to it, it imports none of them

CHANGES_DIR = PROJECT_ROOT / "changes_app"


def toolgate_imports_outside(package: str) -> Detector:
    """A detector of imports of Toolgate's own packages (config, runner, any *_app) other than `package`."""

    def detector(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
        for line, module in imported_modules(tree, path):
            root = root_of(module)
            if module.startswith("<") or (root != package and (root in LAYER_OF or root.endswith("_app"))):
                yield line, module

    return detector


def test_changes_app_imports_no_other_toolgate_package() -> None:
    files = python_files(CHANGES_DIR)
    assert CHANGES_DIR / "services.py" in files

    assert offences(files, toolgate_imports_outside("changes_app"), "changes_app imports") == []


def test_leaf_detector_reports_other_apps_config_and_the_runner() -> None:
    source = (
        "from changes_app.models import Change\n"
        "from policies_app.models import Tenant\n"
        "import config.settings\n"
        "from runner.types import ToolEffect\n"
        "from django.db import models\n"
    )

    found = detect(toolgate_imports_outside("changes_app"), source, CHANGES_DIR / "example.py")

    assert found == [
        (2, "policies_app.models"),
        (2, "policies_app.models.Tenant"),
        (3, "config.settings"),
        (4, "runner.types"),
        (4, "runner.types.ToolEffect"),
    ]


# --- the MCP endpoint is an interface: the catalog selector and the runner, nothing else ---------

MCP_SERVER_DIR = PROJECT_ROOT / "gateway" / "inbound"
PROJECT_PACKAGES = frozenset(
    {
        "config",
        "runner",
        "changes_app",
        "tools_app",
        "gateway",
        "policies_app",
        "identity_app",
        "connections_app",
        "policy_files",
    }
)
# What the MCP interface may use of the project besides runner types and wording and its own package: the caller's
# catalog and the runner (through the services REST uses), the REST exec serializer (one set of rules
# for the out-of-band ids) and their names (its `_meta` keys), and the API-key authentication.
MCP_ALLOWED_NAMES = frozenset(
    {
        "tools_app.services.tool_catalog",
        "tools_app.services.tool_exec",
        # a streamed call runs in a helper thread, which gives its database connection back when done
        "tools_app.services.release_thread_connections",
        "tools_app.services.ExecRequest",
        "tools_app.routing.CALL_ROUTING_FIELDS",
        "tools_app.api.serializers.ExecInputSerializer",
        "tools_app.api.views.ToolRuntime",
        "policies_app.authentication.SCHEME",
        "policies_app.authentication.ToolsExecScope",
        "policies_app.authentication.request_caller",
        "policies_app.authentication.request_subject_token",
        "policies_app.authentication.ServiceAccountRateThrottle",
        "policies_app.authentication.mcp_resource_url",  # the challenge names the resource the request was sent to
        "policies_app.selectors.Caller",
        "core.api.negotiation.PlainAcceptNegotiation",  # the API's shortcut, extended by McpNegotiation
        # the outage mapping and its answer, and the application error, shared with the REST exception handler
        "core.outages.OUTAGE_ERRORS",
        "core.errors.AppError",
        "core.errors.drf_field_errors",
        "runner.pipeline.DEPENDENCY_MESSAGE",
        "runner.pipeline.DEPENDENCY_RETRY_AFTER_S",
        # toolsets and search mode: the toolset's ids as a selector; the search is a tool the
        # runner runs (its id), and a call outside the catalog answers as an unknown id
        "tools_app.toolsets.toolset_scope",
        "tools_app.toolsets.UNKNOWN_TOOLSET",
        "tools_app.search.unknown_tool_refusal",
        # a call made for a person that needs them (URL elicitation): one service module is the door to
        # approvals, sealed state and pages, as tool_exec is to the runner
        "gateway.elicitation.BAD_STATE_MESSAGE",
        "gateway.elicitation.Asking",
        "gateway.elicitation.PersonNeeded",
        "gateway.elicitation.SealedSessions",
        "gateway.elicitation.call_principal",
        "gateway.elicitation.person_needed",
        "gateway.elicitation.request_state_open",
        "gateway.elicitation.waiting_call_id",
        "gateway.elicitation.Principal",
        # an upstream's questions for the client (elicitation, sampling): the sealed round and its answers
        "gateway.input_rounds.MAX_ROUNDS",
        "gateway.input_rounds.AnswersRefused",
        "gateway.input_rounds.OpenedRound",
        "gateway.input_rounds.client_input",
        "gateway.input_rounds.input_round_open",
        "gateway.input_rounds.input_round_seal",
        "gateway.input_rounds.round_on_stream",
        # a 2025-era client's answers to questions asked on its stream, across web workers
        "gateway.input_rounds.question_open",
        "gateway.input_rounds.answer_await",
        "gateway.input_rounds.answer_deliver",
        "gateway.elicitation.Declared",
        # a notifications/cancelled that reaches another worker than the one streaming the call
        "gateway.inflight.CANCEL_POLL_S",
        "gateway.inflight.cancel_file",
        "gateway.inflight.cancel_filed",
        "gateway.elicitation.NOTHING_DECLARED",
        "tools_app.search.SEARCH_TOOL",
        # Resources and prompts: the governed read (lookup, policy, person, budgets, audit) and its listings.
        "gateway.upstream.feature_exec.FeatureRefused",
        "gateway.upstream.feature_exec.feature_fetch",
        "gateway.upstream.feature_exec.features_any_visible",
        "gateway.upstream.feature_exec.features_listed",
    }
)
MCP_ALLOWED_PREFIXES = (
    "runner.types.",
    "runner.wording.",
    "runner.progress.",
    "runner.asking.",
    "gateway.inbound.",
)


def imported_names(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """`module.name` for each name a `from` import binds, and the module of each plain import."""
    package = module_parts(path)[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(node, package)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def mcp_interface_reach(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """Project names outside the allowlist, the ORM, and any `.objects` query."""
    for line, name in imported_names(tree, path):
        if matches(name, "django.db") or (root_of(name) in PROJECT_PACKAGES and not _mcp_may_use(name)):
            yield line, name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "objects":
            yield node.lineno, ast.unparse(node)


def _mcp_may_use(name: str) -> bool:
    return name in MCP_ALLOWED_NAMES or name.startswith(MCP_ALLOWED_PREFIXES)


def called_names(tree: ast.Module) -> set[str]:
    return {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def test_mcp_endpoint_reaches_only_the_catalog_selector_and_the_runner() -> None:
    files = python_files(MCP_SERVER_DIR)
    assert MCP_SERVER_DIR / "views.py" in files

    assert offences(files, mcp_interface_reach, "the MCP interface reaches") == []
    # the rule is not vacuous: the view does call both
    assert {"tool_catalog", "tool_exec"} <= called_names(parse(MCP_SERVER_DIR / "views.py"))


def test_mcp_reach_detector_flags_models_selectors_services_and_queries() -> None:
    source = (
        "from tools_app.services import tool_exec, tool_sync\n"
        "from tools_app.models import ToolInvocation\n"
        "from tools_app import selectors\n"
        "from policies_app.services import approval_decide\n"
        "from django.db import connection\n"
        "import connections_app.broker\n"
        "from runner.types import ToolSpec\n"
        "from runner.pipeline import ToolRunner\n"
        "rows = ToolInvocation.objects.filter(ok=True)\n"
    )

    assert detect(mcp_interface_reach, source, MCP_SERVER_DIR / "example.py") == [
        (1, "tools_app.services.tool_sync"),
        (2, "tools_app.models.ToolInvocation"),
        (3, "tools_app.selectors"),
        (4, "policies_app.services.approval_decide"),
        (5, "django.db.connection"),
        (6, "connections_app.broker"),
        (8, "runner.pipeline.ToolRunner"),
        (9, "ToolInvocation.objects"),
    ]


# --- the app graph: each layer imports only the layers below it (no cycle can form) -------------

# Lowest first. core is the shared kernel (errors, API plumbing, crypto, revocable rows, the outbound URL
# guard); changes_app the change log every app writes to; policies_app holds tenancy, callers, policies,
# approvals and governance state; tools_app the catalog, audit and the tools API; gateway the MCP gateway
# (the /mcp server, upstream MCP servers, the stdio host), which reaches the catalog through its selectors
# and services; identity_app single sign-on; connections_app credentials and grants; signin the OAuth
# authorization server MCP clients sign in with; portal the tenant web UI; policy_files the policy file,
# a section of every app; config composes them all.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("runner",),
    ("core",),
    ("changes_app",),
    ("policies_app",),
    ("tools_app",),
    ("gateway",),
    ("identity_app",),
    ("connections_app",),
    ("signin",),
    ("portal",),
    ("policy_files",),
    ("config",),
)
LAYER_OF = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


def upward_imports(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """Imports (module-level or inside a function) of a Toolgate package on this file's layer or above."""
    own = module_parts(path)[0]
    for line, module in imported_modules(tree, path):
        target = root_of(module)
        if module.startswith("<"):
            yield line, module
        elif target in LAYER_OF and target != own and LAYER_OF[target] >= LAYER_OF[own]:
            yield line, f"{module} (layer {LAYER_OF[target]} from layer {LAYER_OF[own]})"


def test_apps_import_only_the_layers_below_them() -> None:
    files = [path for package in LAYER_OF for path in python_files(PROJECT_ROOT / package)]
    assert PROJECT_ROOT / "connections_app" / "services.py" in files

    assert offences(files, upward_imports, "imports upwards:") == []


def test_layer_detector_flags_upward_and_sideways_imports_and_allows_downward_ones() -> None:
    source = (
        "from connections_app.models import ExecutionGrant\n"
        "def later():\n"
        "    from tools_app import services\n"
        "from changes_app.services import change_record\n"
        "from runner.types import ToolEffect\n"
        "from policies_app.models import Tenant\n"
    )

    found = detect(upward_imports, source, PROJECT_ROOT / "policies_app" / "example.py")

    assert found == [
        (1, "connections_app.models (layer 7 from layer 3)"),
        (1, "connections_app.models.ExecutionGrant (layer 7 from layer 3)"),
        (3, "tools_app (layer 4 from layer 3)"),
        (3, "tools_app.services (layer 4 from layer 3)"),
    ]


# --- one error hierarchy and one copy of the API's plumbing, in the kernel (core) ---------------

KERNEL_ERRORS = PROJECT_ROOT / "core" / "errors.py"
KERNEL_PARSER = PROJECT_ROOT / "core" / "api" / "parser.py"
KERNEL_PAGINATION = PROJECT_ROOT / "core" / "api" / "pagination.py"
KERNEL_IDS = PROJECT_ROOT / "core" / "ids.py"
KERNEL_ADMIN_DISPLAY = PROJECT_ROOT / "core" / "admin_display.py"
API_VIEW_DIRS = (PROJECT_ROOT / "tools_app" / "api", PROJECT_ROOT / "connections_app" / "api")


def _base_names(node: ast.ClassDef) -> list[str]:
    return [base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "") for base in node.bases]


def kernel_copies(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """What only the kernel may define: service error types, the status table, the body reader, pagination,
    the reading of ids.

    Services refuse with core.errors.AppError; the status of a code comes
    from its one table; a body is read with core.api.parser.json_object;
    lists page with core.api.pagination; a caller's id is read with
    core.ids.uuid_or_none; admin messages count with admin_display.count_of.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            if re.search(r"ServiceError$|^ToolCallFailed$", node.name):
                yield node.lineno, f"class {node.name} (raise core.errors.AppError)"
            if path != KERNEL_PAGINATION and any(name.endswith("Pagination") for name in _base_names(node)):
                yield node.lineno, f"class {node.name} (use core.api.pagination)"
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.endswith("json_object"):
            if path != KERNEL_PARSER:
                yield node.lineno, f"def {node.name} (use core.api.parser.json_object)"
        elif isinstance(node, ast.FunctionDef) and node.name in {"_count", "count_of"} and path != KERNEL_ADMIN_DISPLAY:
            yield node.lineno, f"def {node.name} (use core.admin_display.count_of)"
        elif isinstance(node, ast.Assign | ast.AnnAssign) and path != KERNEL_ERRORS:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == "ERROR_STATUS" for target in targets):
                yield node.lineno, "ERROR_STATUS (the table lives in core.errors)"
        elif isinstance(node, ast.Call) and path != KERNEL_IDS and ast.unparse(node.func) in {"uuid.UUID", "UUID"}:
            yield node.lineno, f"{ast.unparse(node.func)}(...) (use core.ids.uuid_or_none)"


def hand_translations(tree: ast.Module, path: Path) -> Iterator[tuple[int, str]]:
    """`except AppError` in an API view: the exception handler translates it, not the view."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None and "AppError" in ast.unparse(node.type):
            yield node.lineno, ast.unparse(node.type)


def test_the_error_type_and_the_api_plumbing_exist_once_in_the_kernel() -> None:
    # the apps and config (the runner, framework-free, cannot import the kernel: it keeps its own)
    files = [path for package in LAYER_OF if package != "runner" for path in python_files(PROJECT_ROOT / package)]
    assert {KERNEL_ERRORS, KERNEL_PARSER, KERNEL_PAGINATION, KERNEL_IDS, KERNEL_ADMIN_DISPLAY} <= set(files)

    assert offences(files, kernel_copies, "defines") == []


def test_api_views_leave_application_errors_to_the_exception_handler() -> None:
    files = [path for directory in API_VIEW_DIRS for path in python_files(directory)]
    assert PROJECT_ROOT / "connections_app" / "api" / "views.py" in files

    assert offences(files, hand_translations, "translates by hand:") == []


def test_kernel_detectors_flag_copies_and_hand_translations() -> None:
    source = (
        "class ConnectionServiceError(ValueError): ...\n"
        "class ToolCallFailed(Exception): ...\n"
        "class PagePagination(LimitOffsetPagination): ...\n"
        "def _json_object(request): ...\n"
        "ERROR_STATUS = {}\n"
        "pk = uuid.UUID(str(value))\n"
        "def _count(n, noun): ...\n"
        "try:\n"
        "    grant_create()\n"
        "except AppError as exc:\n"
        "    raise ValidationError(str(exc))\n"
    )
    path = PROJECT_ROOT / "connections_app" / "api" / "example.py"

    assert detect(kernel_copies, source, path) == [
        (1, "class ConnectionServiceError (raise core.errors.AppError)"),
        (2, "class ToolCallFailed (raise core.errors.AppError)"),
        (3, "class PagePagination (use core.api.pagination)"),
        (4, "def _json_object (use core.api.parser.json_object)"),
        (5, "ERROR_STATUS (the table lives in core.errors)"),
        (6, "uuid.UUID(...) (use core.ids.uuid_or_none)"),
        (7, "def _count (use core.admin_display.count_of)"),
    ]
    assert detect(hand_translations, source, path) == [(10, "AppError")]
