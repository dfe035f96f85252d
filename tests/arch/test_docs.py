"""The repository documents itself: every document its files name is in the repository.

A comment that points at a design document the project grew from (by file
name, by section sign, or by seed number) sends a reader to a file a clone does
not have. Code, templates and docs may point at the README and
docs/; this test fails on any `.md` named that does not resolve (from the
project root or from the naming file's directory) and on references to the
design documents the project grew from. mkdocs.yml names its pages relative to
docs/, so they resolve from there.

A number in an issue tracker sends a reader to a tracker a clone does
not have either: a comment says why, in its own words. Code, tests, templates
and docs may not carry one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "var"})
SCANNED_SUFFIXES = frozenset({".py", ".html", ".md", ".txt", ".toml", ".yml", ".yaml", ".cfg", ".sh", ".example"})
SCANNED_NAMES = frozenset({"Makefile", "Dockerfile", "Procfile", "Procfile.dev", "run"})

# A path ending in .md, not part of a URL (`file:///notes.md`, `https://…/x.md`).
MD_REFERENCE = re.compile(r"(?<![\w/:.-])((?:\.\.?/)*(?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.md)\b")
# The word issue followed by a number (optionally after a hash sign): a tracker's number.
TRACKER_REFERENCE = re.compile(r"\bissues?" + r" #?\d+\b", re.IGNORECASE)
DOCS_DIR = PROJECT_ROOT / "docs"
OUTSIDE_DOCUMENTS = re.compile(r"\b(?:CONTRACT|DESIGN|STYLE|STACK)(?:\.md)?\s*§|\bseeds?/|\bseed \d{3}\b")


def scanned_files() -> Iterator[Path]:
    """The project's own files, walked with hidden and skipped folders pruned (never a virtualenv's thousands)."""
    for folder, subfolders, names in os.walk(PROJECT_ROOT):
        subfolders[:] = sorted(
            name for name in subfolders if (not name.startswith(".") or name == ".ci") and name not in SKIPPED_DIRS
        )
        for name in sorted(names):
            path = Path(folder) / name
            if not name.startswith(".") and (path.suffix in SCANNED_SUFFIXES or name in SCANNED_NAMES):
                yield path


def dangling_references(text: str, *, directory: Path) -> Iterator[tuple[int, str]]:
    """(line, reference) for each `.md` named in `text` that is in neither the project root nor `directory`."""
    for number, line in enumerate(text.splitlines(), start=1):
        for match in MD_REFERENCE.finditer(line):
            name = match.group(1)
            if not ((PROJECT_ROOT / name).is_file() or (directory / name).is_file()):
                yield number, name
        for match in OUTSIDE_DOCUMENTS.finditer(line):
            yield number, match.group(0)
        for match in TRACKER_REFERENCE.finditer(line):
            yield number, match.group(0)


def _directory_of(path: Path) -> Path:
    return DOCS_DIR if path.name == "mkdocs.yml" else path.parent


def test_the_detector_finds_documents_that_are_not_in_the_repository():
    # Assembled from parts, so this file does not itself name what it forbids.
    design, contract, seed = "DESIGN" + ".md", "CONT" + "RACT §", "se" + "ed 002"
    tracker, tracker_hash = "iss" + "ue 12", "Iss" + "ues #3"
    readme = "../README" + ".md"  # resolves from docs/, not from here
    text = (
        f'see docs/api.md and {readme}\n"""As {design} says ({contract}4, {seed})."""\nfile:///notes.md\n'
        f"# fixed in {tracker} and {tracker_hash}; an issue tracker, github__create_issue, issue_12 pass\n"
    )
    assert list(dangling_references(text, directory=PROJECT_ROOT / "docs")) == [
        (2, design),
        (2, contract),
        (2, seed),
        (4, tracker),
        (4, tracker_hash),
    ]


def test_every_document_a_file_names_is_in_the_repository():
    offences = [
        f"{path.relative_to(PROJECT_ROOT)}:{line}: {name}"
        for path in scanned_files()
        for line, name in dangling_references(path.read_text(errors="replace"), directory=_directory_of(path))
    ]
    assert offences == []
