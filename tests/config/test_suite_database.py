"""The suite's own PostgreSQL changes (tests/support/postgres_for_tests.py) keep a flush a flush."""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from connections_app.models import Connection, ExecutionGrant
from policies_app.models import ServiceAccount, Tenant
from tests.factories import ConnectionFactory, GrantFactory, TenantFactory, service_account_with_key
from tests.support.postgres_for_tests import ASYNCHRONOUS_COMMIT, run_ledger


@pytest.mark.django_db(transaction=True)
def test_a_flush_empties_tables_linked_by_foreign_keys_whatever_their_order(postgres_required):
    # given: rows that reference each other across apps (grant -> account -> tenant, grant <-> connection)
    tenant = TenantFactory()
    account, _key = service_account_with_key(tenant)
    GrantFactory(service_account=account, connections=[ConnectionFactory(tenant=tenant)])

    # when: the database is flushed as a transactional test's teardown flushes it
    call_command("flush", interactive=False, verbosity=0)

    # then: every row is gone, deleted rather than truncated
    assert [model.objects.count() for model in (ExecutionGrant, Connection, ServiceAccount, Tenant)] == [0, 0, 0, 0]
    assert connection.ops.sql_flush(no_style(), ["policies_app_tenant", "policies_app_serviceaccount"]) == [
        'DELETE FROM "policies_app_tenant";\nDELETE FROM "policies_app_serviceaccount";'  # one round trip
    ]


@pytest.mark.django_db
def test_the_suites_connections_do_not_wait_for_commits_to_reach_disk(postgres_required):
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone() == ("off",)
    assert ASYNCHRONOUS_COMMIT in os.environ["PGOPTIONS"]  # and the processes the suite starts inherit it


@pytest.mark.django_db
def test_each_worker_clones_its_database_from_the_runs_one_migrated_template(postgres_required):
    ledger = run_ledger()
    if ledger is None:
        pytest.skip("pytest-xdist workers share a template (make test); a run without xdist migrates its own")
    lines = ledger.read_text().split()
    template = connection.settings_dict["NAME"].removesuffix(f"_{os.environ['PYTEST_XDIST_WORKER']}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [template])
        assert cursor.fetchone() == (1,)  # still there: this worker has not finished
    executor = MigrationExecutor(connection)
    assert executor.migration_plan(executor.loader.graph.leaf_nodes()) == []  # the clone is fully migrated
    assert lines.count("migrated") == 1
    assert 0 < lines.count("cloned") <= int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
