"""`./tg`: manage.py on a development clone, as the README tells users to run it."""

from __future__ import annotations

import os
import subprocess

from tests.support.celery_workers import ROOT


def test_tg_runs_manage_py_in_development_mode_from_any_directory(tmp_path):
    env = {name: value for name, value in os.environ.items() if name not in ("DEBUG", "DATABASE_URL", "REDIS_URL")}

    done = subprocess.run(
        [str(ROOT / "tg"), "help", "mcp_upstream"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: manage.py mcp_upstream")
    assert "{add,list,remove,discover,approve,approve-features}" in done.stdout


def test_the_readme_names_the_wrapper_once_near_the_top():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")

    assert readme.index("run on a development clone as\n`./tg …`") < readme.index("\n## ", readme.index("## Two") + 1)
