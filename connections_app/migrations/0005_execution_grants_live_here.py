"""Execution grants move from policies_app to connections_app (the app graph has no cycle).

Only Django's state moves: the tables keep their names (the model sets
db_table), so no row is copied. The content type is relabelled rather than
recreated, so operators' permissions and admin history stay attached, and
change-log entries name the model by its new label.
"""

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _relabel(apps, schema_editor, *, old: str, new: str) -> None:
    db = schema_editor.connection.alias
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(db)
    if not content_types.filter(app_label=new, model="executiongrant").exists():
        content_types.filter(app_label=old, model="executiongrant").update(app_label=new)
    apps.get_model("changes_app", "Change").objects.using(db).filter(object_type=f"{old}.executiongrant").update(
        object_type=f"{new}.executiongrant"
    )


def to_connections_app(apps, schema_editor):
    _relabel(apps, schema_editor, old="policies_app", new="connections_app")


def back_to_policies_app(apps, schema_editor):
    _relabel(apps, schema_editor, old="connections_app", new="policies_app")


class Migration(migrations.Migration):
    dependencies = [
        ("changes_app", "0001_change_log"),
        ("connections_app", "0004_connection_created_by_service_account"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("policies_app", "0004_approval_routing_and_sealed_args"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ExecutionGrant",
                    fields=[
                        ("id", models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("expires_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "connections",
                            models.ManyToManyField(
                                blank=True,
                                db_table="policies_app_executiongrant_connections",
                                related_name="grants",
                                to="connections_app.connection",
                            ),
                        ),
                        (
                            "created_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "revoked_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "service_account",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="grants",
                                to="policies_app.serviceaccount",
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="grants",
                                to="policies_app.tenant",
                            ),
                        ),
                    ],
                    options={"ordering": ["-created_at"], "db_table": "policies_app_executiongrant"},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(to_connections_app, back_to_policies_app),
    ]
