"""On PostgreSQL the audit table becomes partitioned by started_at; tool_call_id claims get a table of their own.

Why and how: tools_app/partitions.py and docs/performance.md.

- ToolCallClaim is created on every database (SQLite leaves it empty).
- On PostgreSQL the table is rebuilt as `PARTITION BY RANGE (started_at)`:
  the existing rows are copied in (into one partition covering their history,
  so the default partition stays empty), the primary key becomes
  (id, started_at) as PostgreSQL requires, every other index, check and foreign
  key is carried over by its definition, and each executed row's
  (tenant, tool_call_id) becomes a claim. The partial unique constraint cannot
  exist on a partitioned table: it stays in Django's state (SQLite keeps
  enforcing it there) and the claims table holds the guarantee instead.
- No foreign key points at the audit table (a partitioned table can only be
  referenced through a key that holds the partition key); the migration checks
  and stops if one ever does.
- This migration is self-contained (it imports no app code): the partitions
  ahead of now are made here once, then hourly by beat.

Reversible: backwards, the table is rebuilt plain, with its unique constraint.
"""

from datetime import UTC, datetime, timedelta

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models
from django.db.models import Q
from django.utils import timezone

TABLE = "tools_app_toolinvocation"
OLD = f"{TABLE}_rebuilt_from"
UNIQUE = "toolinvocation_executed_call_unique_per_tenant"


def _period(instant, granularity):
    moment = instant.astimezone(UTC)
    if granularity == "day":
        start = datetime(moment.year, moment.month, moment.day, tzinfo=UTC)
        return start, start + timedelta(days=1)
    start = datetime(moment.year, moment.month, 1, tzinfo=UTC)
    return start, datetime(moment.year + moment.month // 12, moment.month % 12 + 1, 1, tzinfo=UTC)


def _partition(cursor, start, end):
    name = f"{TABLE}_p{start:%Y%m%d}_{end:%Y%m%d}"
    cursor.execute(f'CREATE TABLE "{name}" PARTITION OF "{TABLE}" FOR VALUES FROM (%s) TO (%s)', [start, end])


def _rebuild(cursor, *, partitioned):
    cursor.execute(
        "SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' AND confrelid = %s::regclass", [TABLE]
    )
    referencing = [row[0] for row in cursor.fetchall()]
    if referencing:
        raise RuntimeError(f"foreign keys point at {TABLE} from {referencing}: give them the partition key first")
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = %s", [TABLE]
    )
    indexes = [(name, definition) for name, definition in cursor.fetchall() if name not in (f"{TABLE}_pkey", UNIQUE)]
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'f' AND conrelid = %s::regclass",
        [TABLE],
    )
    foreign_keys = cursor.fetchall()
    cursor.execute("SELECT min(started_at), coalesce(max(id), 0) FROM " + TABLE)
    oldest, last_id = cursor.fetchone()

    cursor.execute(f'ALTER TABLE "{TABLE}" RENAME TO "{OLD}"')
    like = f'(LIKE "{OLD}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)'
    if partitioned:
        cursor.execute(f'CREATE TABLE "{TABLE}" {like} PARTITION BY RANGE (started_at)')
        cursor.execute(f'CREATE TABLE "{TABLE}_default" PARTITION OF "{TABLE}" DEFAULT')
        granularity = settings.TOOLGATE_AUDIT_PARTITION
        start, end = _period(timezone.now(), granularity)
        if oldest is not None and oldest < start:
            _partition(cursor, _period(oldest, granularity)[0], start)  # the history, in one partition
        for _ in range(settings.TOOLGATE_AUDIT_PARTITIONS_AHEAD + 1):
            _partition(cursor, start, end)
            start, end = _period(end, granularity)
        cursor.execute(
            "INSERT INTO tools_app_toolcallclaim (tenant_id, tool_call_id, claimed_at) "
            f'SELECT tenant_id, tool_call_id, started_at FROM "{OLD}" WHERE executed ON CONFLICT DO NOTHING'
        )
    else:
        cursor.execute(f'CREATE TABLE "{TABLE}" {like}')
    cursor.execute(f'INSERT INTO "{TABLE}" SELECT * FROM "{OLD}"')
    cursor.execute(f'ALTER TABLE "{TABLE}" ALTER COLUMN id RESTART WITH {last_id + 1}')
    cursor.execute(f'DROP TABLE "{OLD}"')
    key = "id, started_at" if partitioned else "id"
    cursor.execute(f'ALTER TABLE "{TABLE}" ADD CONSTRAINT "{TABLE}_pkey" PRIMARY KEY ({key})')
    for _name, definition in indexes:
        cursor.execute(definition.replace(f" ON {OLD} ", f" ON {TABLE} ").replace(f'"{OLD}"', f'"{TABLE}"'))
    for name, definition in foreign_keys:
        cursor.execute(f'ALTER TABLE "{TABLE}" ADD CONSTRAINT "{name}" {definition}')
    if not partitioned:
        cursor.execute(f'CREATE UNIQUE INDEX "{UNIQUE}" ON "{TABLE}" (tenant_id, tool_call_id) WHERE executed')


def partition(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            _rebuild(cursor, partitioned=True)


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            _rebuild(cursor, partitioned=False)


class Migration(migrations.Migration):
    dependencies = [
        ("policies_app", "0001_initial"),
        ("tools_app", "0008_invocation_content_and_tool_error"),
    ]

    operations = [
        migrations.CreateModel(
            name="ToolCallClaim",
            fields=[
                ("pk", models.CompositePrimaryKey("tenant", "tool_call_id", blank=True, editable=False, primary_key=True, serialize=False)),
                ("tool_call_id", models.CharField(max_length=128)),
                ("claimed_at", models.DateTimeField(db_index=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="policies_app.tenant",
                    ),
                ),
            ],
        ),
        migrations.RunPython(partition, unpartition, elidable=False),
        migrations.AddIndex(
            model_name="toolinvocation",
            index=models.Index(
                condition=Q(state="pending") | Q(lease_expires_at__isnull=False),
                fields=["started_at"],
                name="toolinv_in_window",
            ),
        ),
    ]
