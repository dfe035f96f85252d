"""docs/grafana/toolgate.json is built on series Toolgate exports, with the labels they carry."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY

import connections_app.metrics  # noqa: F401 - registers the refresh series
import policies_app.metrics  # noqa: F401 - registers the approval series
from gateway.upstream.metrics import MCP_DISCOVERY
from policies_app.metrics import ApprovalsFromTheTable
from tools_app.metrics import STAGE_SECONDS, TOOL_CALLS

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "toolgate.json"
SUFFIXES = ("_bucket", "_total", "_count", "_sum", "_created")


def exported() -> dict[str, str]:
    """Family name → type, for every toolgate_ family this process exports (database-read ones included)."""
    families = {family.name: family.type for family in REGISTRY.collect() if family.name.startswith("toolgate_")}
    families.update({family.name: family.type for family in ApprovalsFromTheTable().describe()})
    return families


def expressions() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def family_of(series: str) -> str:
    for suffix in SUFFIXES:
        if series.endswith(suffix):
            return series.removesuffix(suffix)
    return series


def test_every_series_the_dashboard_queries_is_exported():
    names = exported()
    used = {series for expr in expressions() for series in re.findall(r"\btoolgate_[a-z_]+", expr)}

    assert used, "the dashboard queries nothing"
    assert {series for series in used if family_of(series) not in names} == set()
    # counters are queried through _total, histograms through _bucket or _sum
    for series in used:
        kind = names[family_of(series)]
        if kind == "counter":
            assert series.endswith("_total"), series
        if kind == "histogram":
            assert series.endswith(("_bucket", "_sum", "_count")), series


def test_the_dashboard_groups_only_by_labels_the_series_carry():
    labels = {
        "toolgate_tool_calls": set(TOOL_CALLS._labelnames),
        "toolgate_pipeline_stage_duration_seconds": set(STAGE_SECONDS._labelnames),
        "toolgate_mcp_discovery": set(MCP_DISCOVERY._labelnames),
    }
    for expr in expressions():
        for grouping, series in re.findall(r"by \(([^)]*)\) \((?:rate|increase)\((toolgate_[a-z_]+)", expr):
            family = family_of(series)
            if family in labels:
                assert set(grouping.replace(" ", "").split(",")) - {"le"} <= labels[family], expr


def test_the_dashboard_is_importable_json_with_unique_panel_ids():
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "toolgate-overview"
    assert {variable["name"] for variable in dashboard["templating"]["list"]} == {"datasource", "tool", "tenant"}
