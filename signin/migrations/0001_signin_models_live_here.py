"""The sign-in models move from policies_app to the signin app.

Only Django's state moves: the tables keep their names (the models set
db_table), so no row is copied. The content types are relabelled rather than
recreated, so operators' permissions and admin history stay attached, and
change-log entries name the models by their new label.
"""

import uuid

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MODELS = ("signinclient", "signingrant", "signincode", "signintoken")


def _relabel(apps, schema_editor, *, old: str, new: str) -> None:
    db = schema_editor.connection.alias
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(db)
    changes = apps.get_model("changes_app", "Change").objects.using(db)
    for model in MODELS:
        if not content_types.filter(app_label=new, model=model).exists():
            content_types.filter(app_label=old, model=model).update(app_label=new)
        changes.filter(object_type=f"{old}.{model}").update(object_type=f"{new}.{model}")


def to_signin(apps, schema_editor):
    _relabel(apps, schema_editor, old="policies_app", new="signin")


def back_to_policies_app(apps, schema_editor):
    _relabel(apps, schema_editor, old="signin", new="policies_app")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("changes_app", "0001_change_log"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("policies_app", "0014_result_guard_arguments"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='SigninClient',
                    fields=[
                        ('revoked_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ('client_id', models.CharField(editable=False, max_length=500, unique=True)),
                        ('kind', models.CharField(choices=[('registered', 'Dynamic registration (RFC 7591)'), ('metadata_document', 'Client ID Metadata Document')], editable=False, max_length=24)),
                        ('client_name', models.CharField(blank=True, max_length=200)),
                        ('client_uri', models.CharField(blank=True, max_length=500)),
                        ('redirect_uris', models.JSONField(default=list)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('registered_from', models.GenericIPAddressField(blank=True, editable=False, null=True)),
                        ('metadata_fetched_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('revoked_by', models.ForeignKey(blank=True, editable=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'verbose_name': 'MCP sign-in client',
                        'db_table': 'policies_app_signinclient',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='SigninGrant',
                    fields=[
                        ('revoked_at', models.DateTimeField(blank=True, editable=False, null=True)),
                        ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                        ('redirect_uri', models.CharField(max_length=500)),
                        ('resource', models.CharField(max_length=500)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('last_used_at', models.DateTimeField(blank=True, null=True)),
                        ('revoke_reason', models.CharField(blank=True, max_length=40)),
                        ('client', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='grants', to='signin.signinclient')),
                        ('delegation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='signin_grants', to='policies_app.delegation')),
                        ('revoked_by', models.ForeignKey(blank=True, editable=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='signin_grants', to='policies_app.tenant')),
                    ],
                    options={
                        'db_table': 'policies_app_signingrant',
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='SigninCode',
                    fields=[
                        ('id', models.BigAutoField(primary_key=True, serialize=False)),
                        ('code_digest', models.CharField(editable=False, max_length=64, unique=True)),
                        ('redirect_uri', models.CharField(max_length=500)),
                        ('code_challenge', models.CharField(max_length=128)),
                        ('resource', models.CharField(max_length=500)),
                        ('scope', models.CharField(blank=True, max_length=200)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('expires_at', models.DateTimeField()),
                        ('used_at', models.DateTimeField(blank=True, null=True)),
                        ('client', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='codes', to='signin.signinclient')),
                        ('delegation', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='signin_codes', to='policies_app.delegation')),
                        ('grant', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='codes', to='signin.signingrant')),
                    ],
                    options={
                        'db_table': 'policies_app_signincode',
                    },
                ),
                migrations.CreateModel(
                    name='SigninToken',
                    fields=[
                        ('id', models.BigAutoField(primary_key=True, serialize=False)),
                        ('access_prefix', models.CharField(editable=False, max_length=16, unique=True)),
                        ('access_digest', models.CharField(editable=False, max_length=64)),
                        ('refresh_prefix', models.CharField(editable=False, max_length=16, unique=True)),
                        ('refresh_digest', models.CharField(editable=False, max_length=64)),
                        ('scope', models.CharField(blank=True, max_length=200)),
                        ('issued_at', models.DateTimeField(auto_now_add=True)),
                        ('access_expires_at', models.DateTimeField()),
                        ('refresh_expires_at', models.DateTimeField()),
                        ('rotated_at', models.DateTimeField(blank=True, null=True)),
                        ('revoked_at', models.DateTimeField(blank=True, null=True)),
                        ('grant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='tokens', to='signin.signingrant')),
                    ],
                    options={
                        'db_table': 'policies_app_signintoken',
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(to_signin, back_to_policies_app),
    ]
