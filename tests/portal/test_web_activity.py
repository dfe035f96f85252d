"""The activity page: the tenant's calls, filtered and paginated, and the per-day chart."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from connections_app.selectors import Viewer
from gateway.upstream.models import McpFeatureRead
from policies_app.models import TenantMembership
from portal.activity import activity_chart, activity_per_day, chart_days
from tests.factories import ConnectionFactory, MembershipFactory, TenantFactory, UserFactory
from tests.support.web import invocation, member_client
from tools_app.models import ToolInvocation

pytestmark = pytest.mark.django_db

ACTIVITY = reverse("web:activity")
NOW = datetime(2026, 11, 20, 15, 0, tzinfo=UTC)
TODAY = NOW.date()
OWNER = Viewer(user_id=None, is_owner=True)


@pytest.fixture
def acme():
    return TenantFactory(slug="acme", name="Acme Corp")


@pytest.fixture
def member(acme):
    return member_client(acme)


@pytest.fixture
def calls(acme):
    """Acme: 3 clock calls today (one failed, two in run r1), 1 clock and 2 waits 3 days ago, 1 clock 20 days ago.
    Globex: 1 clock call today, which acme must never see."""
    rows = [
        invocation(acme, "core__get_current_time", NOW - timedelta(hours=1), run_id="r1", tool_call_id="t1"),
        invocation(acme, "core__get_current_time", NOW - timedelta(hours=2), run_id="r1", tool_call_id="t2"),
        invocation(acme, "core__get_current_time", NOW - timedelta(hours=3), ok=False, tool_call_id="t3"),
        invocation(acme, "core__get_current_time", NOW - timedelta(days=3), tool_call_id="d3-clock"),
        invocation(acme, "core__wait", NOW - timedelta(days=3, hours=1), tool_call_id="d3-wait-1"),
        invocation(acme, "core__wait", NOW - timedelta(days=3, hours=2), tool_call_id="d3-wait-2"),
        invocation(acme, "core__get_current_time", NOW - timedelta(days=20), tool_call_id="old"),
    ]
    invocation(TenantFactory(slug="globex"), "core__get_current_time", NOW, tool_call_id="globex-call")
    return rows


def _listed(response) -> list[str]:
    return [row.tool_call_id for row in response.context["page"].object_list]


@time_machine.travel(NOW, tick=False)
def test_activity_lists_the_tenants_calls_newest_first(member, calls):
    client, _user = member

    response = client.get(ACTIVITY)

    assert response.status_code == 200
    assert _listed(response) == ["t1", "t2", "t3", "d3-clock", "d3-wait-1", "d3-wait-2", "old"]
    assert "globex-call" not in response.content.decode()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"tool": "core__wait"}, ["d3-wait-1", "d3-wait-2"]),
        ({"outcome": "failed"}, ["t3"]),
        ({"outcome": "ok", "tool": "core__get_current_time"}, ["t1", "t2", "d3-clock", "old"]),
        ({"run": "r1"}, ["t1", "t2"]),
        ({"run": "no-such-run"}, []),
    ],
)
@time_machine.travel(NOW, tick=False)
def test_activity_filters(member, calls, query, expected):
    client, _user = member

    response = client.get(ACTIVITY, query)

    assert _listed(response) == expected


@time_machine.travel(NOW, tick=False)
def test_an_invalid_filter_is_reported_and_ignored(member, calls):
    client, _user = member

    response = client.get(ACTIVITY, {"outcome": "maybe", "run": "r1"})

    assert response.status_code == 200
    assert list(response.context["form"].errors) == ["outcome"]
    assert _listed(response) == ["t1", "t2"]


@time_machine.travel(NOW, tick=False)
def test_activity_paginates_fifty_per_page_keeping_the_filters(acme, member):
    client, _user = member
    for number in range(51):
        invocation(acme, "core__wait", NOW - timedelta(minutes=number), tool_call_id=f"w{number:02d}")

    first = client.get(ACTIVITY, {"tool": "core__wait"})
    second = client.get(ACTIVITY, {"tool": "core__wait", "page": 2})

    assert len(_listed(first)) == 50
    assert _listed(second) == ["w50"]
    assert 'href="?tool=core__wait&amp;page=2"' in first.content.decode()


@time_machine.travel(NOW, tick=False)
def test_chart_counts_calls_per_day_per_tool_over_fourteen_days(acme, calls):
    days = chart_days(today=TODAY)

    counts = activity_per_day(tenant_id=acme.pk, viewer=OWNER, since=days[0])

    assert (days[0], days[-1], len(days)) == (date(2026, 11, 7), TODAY, 14)
    assert counts == {
        (TODAY, "core__get_current_time"): 3,
        (date(2026, 11, 17), "core__get_current_time"): 1,
        (date(2026, 11, 17), "core__wait"): 2,
    }
    assert activity_per_day(tenant_id=acme.pk, viewer=OWNER, since=days[0], ok=False) == {
        (TODAY, "core__get_current_time"): 1
    }


@pytest.mark.parametrize("viewer", [OWNER, Viewer(user_id=1, is_owner=False)], ids=["owner", "member"])
def test_aggregate_is_one_query(acme, calls, viewer, django_assert_num_queries):
    with django_assert_num_queries(1):  # a member's visibility rule is part of that query, not one of its own
        activity_per_day(tenant_id=acme.pk, viewer=viewer, since=date(2026, 11, 7))


def test_chart_geometry_stacks_tools_per_day_on_a_round_scale():
    days = chart_days(today=TODAY, days=2)
    counts = {(days[0], "b_tool"): 1, (days[1], "a_tool"): 2, (days[1], "b_tool"): 1}

    chart = activity_chart(counts=counts, days=days)

    assert [(s.tool_id, s.css_class, s.total) for s in chart.series] == [
        ("a_tool", "series-0", 2),
        ("b_tool", "series-1", 2),
    ]
    assert chart.total == 4
    assert [tick.text for tick in chart.value_ticks] == ["0", "2", "4"]  # busiest day 3 -> scale 4
    assert [bar.title for bar in chart.bars] == [
        "b_tool: 1 call on 2026-11-19",
        "a_tool: 2 calls on 2026-11-20",
        "b_tool: 1 call on 2026-11-20",
    ]
    heights = [bar.height for bar in chart.bars]
    assert heights[1] == 2 * heights[0] == 2 * heights[2]
    second_day_a, second_day_b = chart.bars[1], chart.bars[2]
    assert second_day_b.y + second_day_b.height == second_day_a.y  # stacked on top, no gap


def test_mistyped_tool_ids_share_one_unknown_tool_series_listed_last():
    days = chart_days(today=TODAY, days=2)
    counts = {
        (days[0], "core__wait"): 1,
        (days[0], "core__get_c"): 2,
        (days[1], "zz_typo"): 1,
        (days[1], "aa_typo"): 1,
    }

    chart = activity_chart(counts=counts, days=days, known_tool_ids={"core__wait"})

    assert [(s.tool_id, s.total) for s in chart.series] == [("core__wait", 1), ("unknown tool", 4)]
    assert [bar.title for bar in chart.bars] == [
        "core__wait: 1 call on 2026-11-19",
        "unknown tool: 2 calls on 2026-11-19",
        "unknown tool: 2 calls on 2026-11-20",
    ]


@time_machine.travel(NOW, tick=False)
def test_activity_page_draws_the_chart_and_legend_as_inline_svg(member, calls):
    client, _user = member

    response = client.get(ACTIVITY)

    chart = response.context["chart"]
    assert [(s.tool_id, s.total) for s in chart.series] == [("core__get_current_time", 4), ("core__wait", 2)]
    assert chart.total == 6  # the call 20 days ago is outside the window
    html = response.content.decode()
    assert "<svg" in html
    assert html.count('<rect class="bar series-') == 3
    assert "<title>core__get_current_time: 3 calls on 2026-11-20</title>" in html
    assert "<title>core__wait: 2 calls on 2026-11-17</title>" in html
    assert 'class="swatch series-1"' in html
    assert "style=" not in html
    assert "<script" not in html


@time_machine.travel(NOW, tick=False)
def test_chart_follows_the_filters(member, calls):
    client, _user = member

    response = client.get(ACTIVITY, {"run": "r1"})

    chart = response.context["chart"]
    assert chart.counts == {(TODAY, "core__get_current_time"): 2}
    assert "2 calls matching the filters" in response.content.decode()


@time_machine.travel(NOW, tick=False)
def test_empty_activity_says_so(member):
    client, _user = member

    html = client.get(ACTIVITY).content.decode()

    assert "No calls yet" in html
    assert "No calls in the last 14 days" in html
    assert "<svg" not in html


@time_machine.travel(NOW, tick=False)
def test_a_replay_and_a_running_call_are_shown_as_such_not_as_second_runs(acme, member):
    client, _user = member
    first = invocation(acme, "core__wait", NOW - timedelta(minutes=2), tool_call_id="same")
    replay = invocation(acme, "core__wait", NOW - timedelta(minutes=1), ok=False, tool_call_id="same")
    running = invocation(acme, "core__wait", NOW, tool_call_id="running")
    ToolInvocation.objects.filter(pk=first.pk).update(duration_ms=812)
    ToolInvocation.objects.filter(pk=replay.pk).update(decision="replayed", ok=True, error_code="", duration_ms=2)
    ToolInvocation.objects.filter(pk=running.pk).update(state="pending", ended_at=None, duration_ms=None)

    page = client.get(ACTIVITY).content.decode()

    assert page.count("replay of an earlier run") == 1
    assert page.count(">running</span>") == 1
    assert "812 ms" in page
    assert ">2 ms<" not in page  # a replay's own few milliseconds are not a run's duration


# --- calls made for a person, or with a personal connection ----------------------


@pytest.fixture
def people(acme):
    """Alice and bob, plain members; olivia, an owner; alice's personal connection; and their calls today:
    one for nobody, one on alice's behalf with her connection, one naming her connection without a
    subject (refused at the gate, but audited), one on bob's behalf."""
    alice, bob, olivia = (UserFactory(username=name) for name in ("alice", "bob", "olivia"))
    for user in (alice, bob):
        MembershipFactory(user=user, tenant=acme, role=TenantMembership.Role.MEMBER)
    MembershipFactory(user=olivia, tenant=acme, role=TenantMembership.Role.OWNER)
    personal = ConnectionFactory(tenant=acme, owner=alice, label="Alice's GitHub")
    hour = timedelta(hours=1)
    invocation(acme, "core__wait", NOW - hour, tool_call_id="nobodys")
    invocation(
        acme,
        "github__get_user",
        NOW - 2 * hour,
        tool_call_id="for-alice",
        subject_id=f"user:{alice.pk}",
        connection_id=str(personal.pk),
        run_id="alices-run",
    )
    invocation(
        acme, "github__get_user", NOW - 3 * hour, ok=False, tool_call_id="names-alices", connection_id=str(personal.pk)
    )
    invocation(acme, "core__get_current_time", NOW - 4 * hour, tool_call_id="for-bob", subject_id=f"user:{bob.pk}")
    return alice, bob, olivia


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("alice", ["nobodys", "for-alice", "names-alices"]),
        ("bob", ["nobodys", "for-bob"]),
        ("olivia", ["nobodys", "for-alice", "names-alices", "for-bob"]),
    ],
)
@time_machine.travel(NOW, tick=False)
def test_a_member_sees_calls_made_for_nobody_and_their_own_owners_see_all(acme, people, who, expected):
    user = {person.username: person for person in people}[who]
    client = member_client(acme, user=user)[0]

    response = client.get(ACTIVITY)

    assert _listed(response) == expected
    assert response.context["chart"].total == len(expected)  # the chart counts what the list shows


@time_machine.travel(NOW, tick=False)
def test_another_persons_calls_leave_no_detail_on_a_members_page(acme, people):
    alice, bob, _olivia = people
    as_bob = member_client(acme, user=bob)[0]

    page = as_bob.get(ACTIVITY).content.decode()
    by_person = as_bob.get(ACTIVITY, {"person": f"user:{alice.pk}"})
    by_run = as_bob.get(ACTIVITY, {"run": "alices-run"})

    assert "alices-run" not in page
    assert "github__get_user" not in page.split('id="chart-title"')[1]  # neither listed nor in the chart's legend
    assert (_listed(by_person), _listed(by_run)) == ([], [])


@time_machine.travel(NOW, tick=False)
def test_a_plain_members_page_costs_what_an_owners_does(acme, people, django_assert_num_queries):
    _alice, bob, olivia = people
    costs = []
    for user in (olivia, bob):
        client = member_client(acme, user=user)[0]
        client.get(ACTIVITY)  # warm the session
        # session, user, memberships; the page's own 6 (the reads' count finds none: no page of them)
        with django_assert_num_queries(9) as captured:
            client.get(ACTIVITY)
        costs.append(len(captured))
    assert costs == [9, 9]


# --- resource reads and prompt fetches (McpFeatureRead) ----------------------------


def feature_read(tenant, name: str, started_at: datetime, **fields) -> McpFeatureRead:
    return McpFeatureRead.objects.create(
        tenant=tenant,
        kind=fields.pop("kind", McpFeatureRead.Kind.RESOURCE),
        name=name,
        ident=name[:64],
        ok=fields.pop("ok", True),
        started_at=started_at,
        ended_at=started_at,
        duration_ms=2,
        **fields,
    )


def _reads(response) -> list[str]:
    return [row.name for row in response.context["reads"].object_list]


@time_machine.travel(NOW, tick=False)
def test_activity_lists_the_tenants_own_feature_reads_newest_first(acme, member):
    client, _user = member
    feature_read(acme, "toolgate://docs/older", NOW - timedelta(hours=2))
    feature_read(
        acme,
        "mcp__docs__greet",
        NOW - timedelta(hours=1),
        kind=McpFeatureRead.Kind.PROMPT,
        ok=False,
        error_code="rate_limited",
    )
    feature_read(TenantFactory(slug="globex"), "toolgate://globex/secret-plans", NOW)

    response = client.get(ACTIVITY)
    page = response.content.decode()

    assert _reads(response) == ["mcp__docs__greet", "toolgate://docs/older"]
    assert "Prompt fetch" in page
    assert "rate_limited" in page
    assert "secret-plans" not in page
    assert _reads(client.get(ACTIVITY, {"outcome": "failed"})) == ["mcp__docs__greet"]
    assert client.get(ACTIVITY, {"tool": "core__wait"}).context["reads"] is None  # a read names no tool


@time_machine.travel(NOW, tick=False)
def test_feature_reads_paginate_fifty_per_page_apart_from_the_calls(acme, member):
    client, _user = member
    for number in range(51):
        feature_read(acme, f"toolgate://docs/r{number:02d}", NOW - timedelta(minutes=number))

    first = client.get(ACTIVITY)
    second = client.get(ACTIVITY, {"reads_page": 2})

    assert len(_reads(first)) == 50
    assert _reads(second) == ["toolgate://docs/r50"]
    assert 'href="?reads_page=2"' in first.content.decode()


@time_machine.travel(NOW, tick=False)
def test_a_member_sees_reads_made_for_nobody_and_their_own_owners_see_all(acme, people):
    alice, _bob, _olivia = people
    feature_read(acme, "toolgate://docs/nobodys", NOW)
    feature_read(acme, "toolgate://docs/alices", NOW - timedelta(minutes=1), subject_id=f"user:{alice.pk}")

    seen = {user.username: _reads(member_client(acme, user=user)[0].get(ACTIVITY)) for user in people}

    assert seen == {
        "alice": ["toolgate://docs/nobodys", "toolgate://docs/alices"],
        "bob": ["toolgate://docs/nobodys"],
        "olivia": ["toolgate://docs/nobodys", "toolgate://docs/alices"],
    }
