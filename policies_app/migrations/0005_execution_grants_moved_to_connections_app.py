"""Execution grants now belong to connections_app (its migration 0005): only the state forgets them here."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("connections_app", "0005_execution_grants_live_here"),
        ("policies_app", "0004_approval_routing_and_sealed_args"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name="ExecutionGrant")]),
    ]
