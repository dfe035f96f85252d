"""The manual builds: `mkdocs build --strict`, so every link and anchor between its pages resolves.

mkdocs.yml turns each kind of broken reference into a warning (a page missing from the nav, a link to a
page or an anchor that does not exist), and --strict makes any warning fail the build. The configuration
page is built from the code (config/docs_hooks.py): the tests below also hold that the build fails when
the code and .env.example disagree about a variable.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config import docs_hooks

ROOT = Path(__file__).resolve().parents[2]


def _build(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_manual_builds_with_strict_link_and_anchor_checks(tmp_path):
    built = _build(tmp_path)

    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    page = (tmp_path / "site" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "TOOLGATE_ENCRYPTION_KEYS" in page
    assert docs_hooks.MARKER not in page


def test_every_variable_config_reads_is_in_the_generated_table():
    table = docs_hooks.settings_table()

    for name, read in docs_hooks.code_reads().items():
        assert f"| `{name}` |" in table
        assert read.places  # each names where it is read
    assert "| `SECRET_KEY` | str |" in table
    assert "`config/settings.py:" in table


def _tree(tmp_path: Path, *, settings: str, env_example: str) -> tuple[Path, Path]:
    config = tmp_path / "config"
    config.mkdir()
    (config / "settings.py").write_text(settings)
    (tmp_path / ".env.example").write_text(env_example)
    return config, tmp_path / ".env.example"


def test_a_variable_read_without_a_description_fails_the_table(tmp_path):
    config, example = _tree(
        tmp_path,
        settings='A = env.int("TOOLGATE_A", default=1)\nB = env.bool("TOOLGATE_NEW", default=False)\n',
        env_example="# What A is.\n# TOOLGATE_A=1\n",
    )

    with pytest.raises(docs_hooks.SettingsDrift, match=r"not described in \.env\.example: TOOLGATE_NEW"):
        docs_hooks.settings_table(config, example, tmp_path / "no-compose.yml")


def test_a_description_of_a_variable_nothing_reads_fails_the_table(tmp_path):
    config, example = _tree(
        tmp_path,
        settings='A = env.int("TOOLGATE_A", default=1)\n',
        env_example="# What A is.\n# TOOLGATE_A=1\n\n# Gone from the code.\n# TOOLGATE_OLD=2\n",
    )

    with pytest.raises(docs_hooks.SettingsDrift, match="read nowhere: TOOLGATE_OLD"):
        docs_hooks.settings_table(config, example, tmp_path / "no-compose.yml")


def test_the_table_takes_kind_and_default_from_the_code_and_meaning_from_the_example(tmp_path):
    config, example = _tree(
        tmp_path,
        settings=(
            'A = env.int("TOOLGATE_A", default=60)\n'
            'B = env.list("TOOLGATE_B", default=[])\n'
            'import os\nC = os.environ.get("PORT", "8000")\n'
        ),
        env_example=(
            "# Seconds between sweeps.\n# TOOLGATE_A=60\n\n"
            "# Hosts, comma-separated | or none.\n# TOOLGATE_B=a,b\n# PORT=8000\n"
        ),
    )

    rows = docs_hooks.settings_table(config, example, tmp_path / "no-compose.yml").splitlines()

    assert rows[2] == "| `TOOLGATE_A` | int | `60` | `config/settings.py:1` | Seconds between sweeps. |"
    assert rows[3] == "| `TOOLGATE_B` | list | `[]` | `config/settings.py:2` | Hosts, comma-separated \\| or none. |"
    # A line right under another shares its comment.
    assert rows[4] == '| `PORT` | str | `"8000"` | `config/settings.py:4` | Hosts, comma-separated \\| or none. |'
