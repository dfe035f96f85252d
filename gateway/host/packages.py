"""npm and pip packages of stdio servers, installed when the server is added, never by the child.

`mcp_upstream add SLUG --npm PACKAGE@VERSION` installs that exact version into the server's own
directory, `<TOOLGATE_MCP_HOST_DIR>/packages/<slug>/`, with npm's install scripts off (they would
run unsandboxed, as the operator); `--pip PACKAGE==VERSION` installs wheels only into a
virtualenv there. The host then binds that directory read-only into the child at the same path
and puts its programs (`node_modules/.bin`, the virtualenv's `bin`) first on the child's PATH, so
the server's command is simply the package's program (`mcp-server-memory`): it starts with no
network and nothing to download, and what runs is the version the operator approved.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gateway.host.environment import NPM_QUIET

# npm's own rules for a package name (lower case, URL-safe, optional @scope/), and an exact version.
NPM_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$")
EXACT_VERSION = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
MAX_NAME_CHARS = 214
INSTALL_TIMEOUT_S = 600.0


class PackageError(Exception):
    """A package spec or install that cannot be used; the message says what to do."""


@dataclass(frozen=True, slots=True)
class NpmPackage:
    name: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"


def parse_npm_spec(spec: str) -> NpmPackage:
    """`name@1.2.3` or `@scope/name@1.2.3`: an exact version, since the version is what was approved."""
    name, sep, version = spec.strip().rpartition("@")
    if not sep or not name or name == "@":
        raise PackageError(
            f"--npm takes PACKAGE@VERSION with an exact version (e.g. @modelcontextprotocol/server-memory@2026.8.31), "
            f"not {spec[:80]!r}; `npm view PACKAGE version` prints the latest"
        )
    if len(name) > MAX_NAME_CHARS or not NPM_NAME.match(name):
        raise PackageError(f"{name[:80]!r} is not an npm package name")
    if not EXACT_VERSION.match(version):
        raise PackageError(
            f"--npm needs an exact version such as 1.2.3, not {version[:40]!r} (a range or tag could install "
            "something other than what was approved)"
        )
    return NpmPackage(name=name, version=version)


def package_dir(root: Path, slug: str) -> Path:
    """Where the server `slug`'s package is installed (one source for the add command and the host)."""
    return Path(root) / "packages" / slug


def bin_dir(directory: Path) -> Path:
    return Path(directory) / "node_modules" / ".bin"


def installed_version(directory: Path, name: str) -> str | None:
    """The version of `name` installed in `directory` (None when it is not there)."""
    manifest = Path(directory) / "node_modules" / name / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def package_programs(directory: Path, name: str) -> list[str]:
    """The programs (`bin` entries) the installed package declares, sorted."""
    manifest = Path(directory) / "node_modules" / name / "package.json"
    try:
        declared = json.loads(manifest.read_text()).get("bin") or {}
    except (OSError, ValueError, AttributeError):
        return []
    if isinstance(declared, str):  # `"bin": "dist/index.js"` is named after the package
        return [name.rpartition("/")[2]]
    return sorted(str(program) for program in declared) if isinstance(declared, dict) else []


def npm_install(package: NpmPackage, directory: Path, *, timeout_s: float = INSTALL_TIMEOUT_S) -> list[str]:
    """Install exactly `package` into `directory` (replacing what was there); its programs.

    npm runs in a staging directory beside the target, which replaces the old install only once
    npm has succeeded: a failed install leaves the running server's package as it was.
    """
    npm = shutil.which("npm")
    if npm is None:
        raise PackageError("npm is not installed where this command runs (it installs the server's package)")
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    argv = [
        npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-update-notifier",
        "--ignore-scripts", "--omit=dev", "--save-exact", "--cache", str(directory.parent / ".npm-cache"),
        package.spec,
    ]  # fmt: skip
    try:
        try:
            done = subprocess.run(  # noqa: S603 - a fixed argv, no shell
                argv,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                env={**os.environ, **NPM_QUIET},
            )
        except subprocess.TimeoutExpired:
            raise PackageError(f"npm did not install {package.spec} within {timeout_s:g} s") from None
        if done.returncode != 0:
            reason = next((line for line in done.stderr.splitlines() if "error" in line.lower()), "no reason given")
            raise PackageError(f"npm could not install {package.spec}: {reason.strip()[:300]}")
        if installed_version(staging, package.name) != package.version:
            raise PackageError(f"npm did not install {package.spec} (another version is in node_modules)")
        programs = package_programs(staging, package.name)
        old = directory.with_name(f".{directory.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if directory.exists():
            directory.rename(old)
        staging.rename(directory)
        shutil.rmtree(old, ignore_errors=True)
        return programs
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- Python packages (`--pip NAME==VERSION`), each in a virtualenv of its own ------------------------

PIP_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,200}[A-Za-z0-9])?$")
PIP_VERSION = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


@dataclass(frozen=True, slots=True)
class PipPackage:
    name: str
    version: str

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    @property
    def normalized(self) -> str:
        """PEP 503's name, as a dist-info directory spells it (underscores)."""
        return re.sub(r"[-_.]+", "_", self.name).lower()


def parse_pip_spec(spec: str) -> PipPackage:
    """`name==1.2.3`: an exact version, for the same reason as npm's."""
    name, sep, version = spec.strip().partition("==")
    if not sep or not PIP_NAME.match(name):
        raise PackageError(
            f"--pip takes PACKAGE==VERSION with an exact version (e.g. mcp-server-fetch==2026.10.24), not "
            f"{spec[:80]!r}; `pip index versions PACKAGE` lists them"
        )
    if not PIP_VERSION.match(version):
        raise PackageError(f"--pip needs an exact version such as 1.2.3, not {version[:40]!r}")
    return PipPackage(name=name, version=version)


def _dist_info(directory: Path, package: PipPackage) -> Path | None:
    for candidate in sorted((Path(directory) / "venv" / "lib").glob("python*/site-packages/*.dist-info")):
        name, _, version = candidate.name.removesuffix(".dist-info").rpartition("-")
        if re.sub(r"[-_.]+", "_", name).lower() == package.normalized:
            return candidate if version == package.version else None
    return None


def pip_installed_version(directory: Path, package: PipPackage) -> str | None:
    return package.version if _dist_info(directory, package) is not None else None


def pip_programs(directory: Path, package: PipPackage) -> list[str]:
    """The console scripts the installed distribution declares, sorted."""
    info = _dist_info(directory, package)
    if info is None:
        return []
    try:
        lines = (info / "entry_points.txt").read_text().splitlines()
    except OSError:
        return []
    programs, section = [], ""
    for raw in lines:
        line = raw.strip()
        if line.startswith("["):
            section = line.strip("[]").strip()
        elif section == "console_scripts" and "=" in line:
            programs.append(line.partition("=")[0].strip())
    return sorted(programs)


def pip_install(package: PipPackage, directory: Path, *, timeout_s: float = INSTALL_TIMEOUT_S) -> list[str]:
    """Install exactly `package`, wheels only (no build code runs), into a new virtualenv in `directory`.

    A virtualenv's scripts name its interpreter by absolute path, so it is built in place (the host
    binds it at the same path): the old install is kept aside and put back if this one fails.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    old = directory.with_name(f".{directory.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        directory.rename(old)
    python = str(directory / "venv" / "bin" / "python")
    steps = [
        [sys.executable, "-m", "venv", str(directory / "venv")],
        [python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--only-binary=:all:",
         "--quiet", package.spec],
    ]  # fmt: skip
    try:
        for argv in steps:
            try:
                done = subprocess.run(  # noqa: S603 - a fixed argv, no shell
                    argv, capture_output=True, text=True, timeout=timeout_s, check=False
                )
            except subprocess.TimeoutExpired:
                raise PackageError(f"pip did not install {package.spec} within {timeout_s:g} s") from None
            if done.returncode != 0:
                errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
                reason = (errors or done.stderr.strip().splitlines()[-1:] or ["no reason given"])[0]
                raise PackageError(f"pip could not install {package.spec}: {reason.strip()[:300]}")
        if pip_installed_version(directory, package) != package.version:
            raise PackageError(f"pip did not install {package.spec}")
    except PackageError:
        shutil.rmtree(directory, ignore_errors=True)
        if old.exists():
            old.rename(directory)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return pip_programs(directory, package)


# --- either kind ---------------------------------------------------------------------------------

Package = NpmPackage | PipPackage


def parse_package(*, npm: str = "", pip: str = "") -> Package | None:
    """The server's package from its row's `npm_package` / `pip_package` (None without one)."""
    if npm and pip:
        raise PackageError("a server has one package: --npm or --pip, not both")
    if npm:
        return parse_npm_spec(npm)
    return parse_pip_spec(pip) if pip else None


def version_of(package: Package, directory: Path) -> str | None:
    if isinstance(package, NpmPackage):
        return installed_version(directory, package.name)
    return pip_installed_version(directory, package)


def programs_of(package: Package, directory: Path) -> list[str]:
    if isinstance(package, NpmPackage):
        return package_programs(directory, package.name)
    return pip_programs(directory, package)


def programs_dir(package: Package, directory: Path) -> Path:
    """What goes first on the child's PATH: node_modules/.bin, or the virtualenv's bin."""
    return bin_dir(directory) if isinstance(package, NpmPackage) else Path(directory) / "venv" / "bin"


def install(package: Package, directory: Path) -> list[str]:
    if isinstance(package, NpmPackage):
        return npm_install(package, directory)
    return pip_install(package, directory)
