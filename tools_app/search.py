"""Tool search: a caller's catalog ranked by relevance to a few words.

Search only ever ranks specs the caller already may see (its catalog, after
policy, subject rules and toolset): it takes that list as input and returns a
subset of it, so a search result can never reveal a tool the caller could not
call. On PostgreSQL the database ranks: each tool row carries a stored
`tsvector` (migrations 0011 and 0012, GIN-indexed), matched with an OR of the
query's words (a task described in a sentence rarely repeats every word of a
tool's description) and ranked by `ts_rank` with the id and the title weighted
above the tags and the description. The embedded SQLite default has no
full-text engine, so a plain weighted word count stands in for it there.

Two interfaces use it: the catalog's `?q=` (tools_app/api/views.py) and the
governed tool `toolgate__search_tools` (tools_app/tools/search_tools.py), whose
`catalog` capability is the `CatalogSearchIndex` below, bound in config/runtime.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import reduce
from operator import or_
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVectorField
from django.db import connection, transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from runner.catalog import unknown_tool_message
from runner.ports import PolicyDecider, ToolSource
from runner.types import ErrorCode, ToolExecResult, ToolInvocationContext, ToolSpec
from tools_app.models import Tool
from tools_app.services import context_catalog
from tools_app.tools import search_tools
from tools_app.tools.search_tools import MAX_QUERY_LENGTH

SEARCH_TOOL = search_tools.NAME
MAX_QUERY_WORDS = 16
WORD_RE = re.compile(r"[^\W_]+", re.UNICODE)
# The English stop words that carry no meaning for a tool (PostgreSQL's dictionary drops its own).
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "please",
        "that",
        "the",
        "this",
        "to",
        "what",
        "with",
    ]
)
IN_CATALOG = '"tools_app_tool"."id" = ANY(%s)'
SEARCH_DOCUMENT = RawSQL('"tools_app_tool"."search_document"', [], output_field=SearchVectorField())


def query_words(query: str) -> list[str]:
    """The words of a query, lower-cased, in order, without repeats or stop words; at most MAX_QUERY_WORDS."""
    words = [word for word in WORD_RE.findall(query.lower()[:MAX_QUERY_LENGTH]) if word not in STOP_WORDS]
    return list(dict.fromkeys(word for word in words if len(word) <= 64))[:MAX_QUERY_WORDS]


def tool_search(*, specs: Sequence[ToolSpec], query: str, limit: int | None = None) -> list[ToolSpec]:
    """The specs among `specs` that match `query`, most relevant first (ties by id); never a spec not given."""
    words = query_words(query)
    if not words or not specs:
        return []
    by_id = {spec.name: spec for spec in specs}
    if connection.vendor == "postgresql":
        ranked = _ranked_ids_postgresql(list(by_id), words, limit)
    else:
        ranked = _ranked_ids_plain(list(by_id.values()), words, limit)
    return [by_id[tool_id] for tool_id in ranked if tool_id in by_id]


def search_statement(
    *, tool_ids: Sequence[str] | None, query: str, limit: int | None = None
) -> tuple[str, tuple[Any, ...]]:
    """The SQL and parameters PostgreSQL runs for a search (for EXPLAIN in the bench and tests).

    `tool_ids` None: the match alone, over every row (what the GIN index serves).
    """
    ids = None if tool_ids is None else list(tool_ids)
    sql, params = _postgresql_queryset(ids, query_words(query), limit).query.sql_with_params()
    return sql, tuple(params)


def _postgresql_queryset(tool_ids: list[str] | None, words: list[str], limit: int | None):  # type: ignore[no-untyped-def]
    match = reduce(or_, (SearchQuery(word, config="english", search_type="plain") for word in words))
    # The catalog's ids as one array parameter (`= ANY(%s)`): `pk__in` would compile one placeholder
    # per id, which costs more than the search itself at thousands of tools.
    rows = (
        (
            Tool.objects.all()
            if tool_ids is None
            else Tool.objects.filter(RawSQL(IN_CATALOG, (tool_ids,), BooleanField()))  # noqa: S611 - constant SQL, ids bound
        )
        .alias(document=SEARCH_DOCUMENT)
        .filter(document=match)
        .annotate(rank=SearchRank(SEARCH_DOCUMENT, match))
        .order_by("-rank", "id")
        .values_list("id", flat=True)
    )
    return rows[:limit] if limit is not None else rows


def _ranked_ids_postgresql(tool_ids: list[str], words: list[str], limit: int | None) -> list[str]:
    """The ranked ids, read through the GIN index.

    PostgreSQL costs `@@` like a cheap operator, so when a common word
    matches a fifth of the catalog it picks a sequential scan that evaluates
    every row's document: measured 4x slower at 10,000 tools than the bitmap
    scan of the GIN index (bench/tool_search.py). The search therefore turns
    sequential scans off for its own statement only: SET LOCAL inside a
    transaction of its own (or a savepoint of the caller's), RESET after it.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
        ranked = list(_postgresql_queryset(tool_ids, words, limit))
        with connection.cursor() as cursor:
            cursor.execute("RESET enable_seqscan")  # an enclosing transaction keeps its own plans
    return ranked


# Weights of the plain fallback, in the order of PostgreSQL's: id and title, tags, description.
PLAIN_WEIGHTS = (("name", 1.0), ("title", 1.0), ("tags", 0.4), ("description", 0.2))


def _stem(word: str) -> str:
    """A crude suffix cut so `files`/`file` and `searching`/`search` meet (SQLite has no stemmer)."""
    for suffix in ("ing", "es", "s", "ed"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _ranked_ids_plain(specs: list[ToolSpec], words: list[str], limit: int | None) -> list[str]:
    """How many of the query's words a tool matches anywhere first, then where they match (the weights).

    Coverage comes first because a sentence is the usual query: for "add two
    numbers" a tool described as the sum of two numbers meets two of its
    words, where `add_observations` meets only one, however heavy its id.
    """
    stems = {_stem(word) for word in words}
    scored = []
    for spec in specs:
        fields = {
            "name": spec.name,
            "title": spec.title or "",
            "tags": " ".join(spec.tags),
            "description": spec.description,
        }
        score = 0.0
        covered: set[str] = set()
        for field, weight in PLAIN_WEIGHTS:
            matched = stems & {_stem(token) for token in WORD_RE.findall(fields[field].lower())}
            score += weight * len(matched)
            covered |= matched
        if score > 0:
            scored.append((-len(covered), -score, spec.name))
    scored.sort()
    ranked = [tool_id for *_, tool_id in scored]
    return ranked[:limit] if limit is not None else ranked


# --- the search as a capability (the governed tool `toolgate__search_tools`) -----------------


class CatalogSearchIndex:
    """The `catalog` capability's index: a search of the catalog of the call it serves.

    The runner binds it to each call's context, after the lookup, the policy
    and the person's delegation allowed the search itself; the catalog is then
    `context_catalog` of that context (the same rule as `GET /api/v1/tools` and
    `tools/list`, toolset included), and only its tools are ranked. A context
    whose subject token cannot be used finds nothing.

    `source` is asked at search time: the source holds the search tool bound
    to this index, so it exists only after the index does (config/runtime.py).
    """

    def __init__(self, *, source: Callable[[], ToolSource], policy: PolicyDecider) -> None:
        self._source = source
        self._policy = policy

    def search(self, ctx: ToolInvocationContext, query: str, limit: int) -> list[ToolSpec]:
        specs = context_catalog(ctx=ctx, source=self._source(), policy=self._policy)
        return tool_search(specs=specs or [], query=query, limit=limit)


def unknown_tool_refusal(*, tool_id: str, tool_call_id: str, catalog: Iterable[ToolSpec]) -> ToolExecResult:
    """What a tool outside the caller's catalog answers through a meta-tool: the unknown id's answer.

    The same whether the tool does not exist, is switched off, is outside the
    policy or the toolset; the hint names only ids the caller may list.
    """
    return ToolExecResult(
        tool_call_id=tool_call_id,
        tool_id=tool_id,
        ok=False,
        error_code=ErrorCode.UNAVAILABLE,
        safe_message=unknown_tool_message(tool_id, catalog),
    )
