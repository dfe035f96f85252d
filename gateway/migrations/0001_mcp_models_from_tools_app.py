"""The MCP gateway's models, taken over from tools_app with their tables (`db_table` keeps each name).

State only for the models (tools_app/migrations/0021_mcp_models_to_gateway.py drops them from
tools_app's state): no table is rebuilt and no row is copied. What names the models by app label is
renamed in the same step: their content types (so auth permissions, group permissions and admin log
entries carry over) and the change log's object types (so an object's history stays one history).
"""

import django.db.models.deletion
from django.apps.registry import Apps
from django.conf import settings
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

MODELS = ("mcpserver", "mcptool", "mcpfeature", "mcpfeatureread")
OLD, NEW = "tools_app", "gateway"


def relabel(apps: Apps, old: str, new: str) -> None:
    """Point the models' content types and change-log rows from app label `old` to `new`.

    A content type already made under the new label (a `migrate` that ran post_migrate
    for the new app before this step) holds nothing yet: it gives way to the old one,
    which keeps its id and so every permission and log entry that refers to it.
    """
    content_types = apps.get_model("contenttypes", "ContentType")
    changes = apps.get_model("changes_app", "Change")
    for model in MODELS:
        existing = content_types.objects.filter(app_label=old, model=model).first()
        if existing is None:
            continue
        content_types.objects.filter(app_label=new, model=model).delete()
        existing.app_label = new
        existing.save(update_fields=["app_label"])
        changes.objects.filter(object_type=f"{old}.{model}").update(object_type=f"{new}.{model}")


def forwards(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    relabel(apps, OLD, NEW)


def backwards(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    relabel(apps, NEW, OLD)


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('changes_app', '0001_change_log'),
        ('policies_app', '0014_result_guard_arguments'),
        ('tools_app', '0021_mcp_models_to_gateway'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='McpServer',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('slug', models.CharField(max_length=32, unique=True)),
                        ('transport', models.CharField(choices=[('http', 'Streamable HTTP'), ('stdio', 'stdio (run by the MCP host)')], default='http', max_length=8)),
                        ('url', models.URLField(blank=True, max_length=2000)),
                        ('command', models.JSONField(blank=True, default=list)),
                        ('env', models.JSONField(blank=True, default=dict)),
                        ('secret_env_names', models.JSONField(blank=True, default=list, editable=False)),
                        ('secret_env_sealed', models.BinaryField(blank=True, null=True)),
                        ('secret_env_key_id', models.CharField(blank=True, editable=False, max_length=64)),
                        ('npm_package', models.CharField(blank=True, help_text='stdio: the npm package installed at add, NAME@VERSION (read-only)', max_length=300)),
                        ('pip_package', models.CharField(blank=True, help_text='stdio: the pip package installed at add, NAME==VERSION (read-only)', max_length=300)),
                        ('binds', models.JSONField(blank=True, default=list)),
                        ('credential_env', models.CharField(blank=True, help_text="stdio with a provider: the child's variable for the connection secret", max_length=64)),
                        ('allowed_hosts', models.JSONField(blank=True, default=list)),
                        ('trusted_unsandboxed', models.BooleanField(default=False, help_text="stdio: may run without bubblewrap in production (it then sees the host's network)")),
                        ('provider', models.CharField(blank=True, help_text='Tools need a tenant connection of this provider (else the token below).', max_length=64)),
                        ('operator_token_sealed', models.BinaryField(blank=True, null=True)),
                        ('operator_token_key_id', models.CharField(blank=True, editable=False, max_length=64)),
                        ('discover_seconds', models.PositiveIntegerField(default=300)),
                        ('enabled', models.BooleanField(default=True)),
                        ('removed_at', models.DateTimeField(blank=True, null=True)),
                        ('last_discovery_at', models.DateTimeField(blank=True, null=True)),
                        ('last_discovery_status', models.CharField(choices=[('never', 'Never run'), ('ok', 'OK'), ('failed', 'Failed')], default='never', max_length=16)),
                        ('last_discovery_error', models.CharField(blank=True, max_length=500)),
                        ('protocol_version', models.CharField(blank=True, max_length=32)),
                        ('offers_completions', models.BooleanField(default=False, editable=False)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        'verbose_name': 'MCP server',
                        'db_table': 'tools_app_mcpserver',
                        'ordering': ['slug'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('discover_seconds__gte', 10)), name='mcpserver_discover_min_10s'), models.CheckConstraint(condition=models.Q(models.Q(('transport', 'http'), models.Q(('url', ''), _negated=True)), models.Q(('transport', 'stdio'), ('url', '')), _connector='OR'), name='mcpserver_url_xor_command')],
                    },
                ),
                migrations.CreateModel(
                    name='McpFeatureRead',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('subject_id', models.CharField(blank=True, max_length=64)),
                        ('kind', models.CharField(choices=[('resource', 'Resource read'), ('prompt', 'Prompt fetch'), ('completion', 'Prompt argument completion')], max_length=16)),
                        ('ident', models.CharField(blank=True, max_length=64)),
                        ('name', models.CharField(max_length=2100)),
                        ('ok', models.BooleanField(default=False)),
                        ('error_code', models.CharField(blank=True, max_length=32)),
                        ('safe_message', models.CharField(blank=True, max_length=500)),
                        ('args_sha256', models.CharField(blank=True, max_length=64)),
                        ('result_bytes', models.PositiveIntegerField(blank=True, null=True)),
                        ('started_at', models.DateTimeField()),
                        ('ended_at', models.DateTimeField()),
                        ('duration_ms', models.PositiveIntegerField()),
                        ('service_account', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='policies_app.serviceaccount')),
                        ('tenant', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='policies_app.tenant')),
                    ],
                    options={
                        'verbose_name': 'MCP resource read or prompt fetch',
                        'db_table': 'tools_app_mcpfeatureread',
                        'ordering': ['-started_at', '-id'],
                        'indexes': [models.Index(fields=['tenant', '-started_at'], name='mcpfeatureread_tenant_started')],
                    },
                ),
                migrations.CreateModel(
                    name='McpFeature',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(choices=[('resource', 'Resource'), ('prompt', 'Prompt')], max_length=16)),
                        ('upstream_key', models.CharField(max_length=2000)),
                        ('name', models.CharField(max_length=2100)),
                        ('ident', models.CharField(max_length=64)),
                        ('status', models.CharField(choices=[('pending', 'Pending review'), ('approved', 'Approved'), ('drifted', 'Drifted (quarantined)'), ('removed', 'Removed upstream')], default='pending', max_length=16)),
                        ('is_enabled', models.BooleanField(default=False)),
                        ('live_definition', models.JSONField()),
                        ('live_hash', models.CharField(max_length=64)),
                        ('approved_definition', models.JSONField(blank=True, null=True)),
                        ('approved_hash', models.CharField(blank=True, max_length=64)),
                        ('approved_at', models.DateTimeField(blank=True, null=True)),
                        ('approved_via', models.CharField(blank=True, max_length=150)),
                        ('first_seen_at', models.DateTimeField()),
                        ('last_seen_at', models.DateTimeField()),
                        ('drifted_at', models.DateTimeField(blank=True, null=True)),
                        ('enabled_before_quarantine', models.BooleanField(default=False)),
                        ('removed_at', models.DateTimeField(blank=True, null=True)),
                        ('approved_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('server', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='features', to='gateway.mcpserver')),
                    ],
                    options={
                        'verbose_name': 'MCP resource or prompt',
                        'verbose_name_plural': 'MCP resources and prompts',
                        'db_table': 'tools_app_mcpfeature',
                        'ordering': ['server__slug', 'kind', 'name'],
                        'constraints': [models.UniqueConstraint(fields=('server', 'kind', 'upstream_key'), name='mcpfeature_unique_key'), models.UniqueConstraint(fields=('kind', 'name'), name='mcpfeature_unique_name'), models.CheckConstraint(condition=models.Q(models.Q(('status', 'approved'), _negated=True), models.Q(('approved_hash', ''), _negated=True), _connector='OR'), name='mcpfeature_approved_has_hash'), models.CheckConstraint(condition=models.Q(models.Q(('is_enabled', True), _negated=True), ('status', 'approved'), _connector='OR'), name='mcpfeature_enabled_only_approved')],
                    },
                ),
                migrations.CreateModel(
                    name='McpTool',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('upstream_name', models.CharField(max_length=512)),
                        ('status', models.CharField(choices=[('pending', 'Pending review'), ('approved', 'Approved'), ('drifted', 'Drifted (quarantined)'), ('removed', 'Removed upstream')], default='pending', max_length=16)),
                        ('live_definition', models.JSONField()),
                        ('live_hash', models.CharField(max_length=64)),
                        ('approved_definition', models.JSONField(blank=True, null=True)),
                        ('approved_hash', models.CharField(blank=True, max_length=64)),
                        ('approved_at', models.DateTimeField(blank=True, null=True)),
                        ('approved_via', models.CharField(blank=True, help_text='admin, policy import, or a command', max_length=150)),
                        ('suggested_effect', models.CharField(choices=[('read_only', 'read_only'), ('state_change', 'state_change'), ('external_side_effect', 'external_side_effect')], max_length=32)),
                        ('effect_confirmed_at', models.DateTimeField(blank=True, null=True)),
                        ('first_seen_at', models.DateTimeField()),
                        ('last_seen_at', models.DateTimeField()),
                        ('drifted_at', models.DateTimeField(blank=True, null=True)),
                        ('enabled_before_quarantine', models.BooleanField(default=False)),
                        ('removed_at', models.DateTimeField(blank=True, null=True)),
                        ('approved_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('effect_confirmed_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('server', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='tools', to='gateway.mcpserver')),
                        ('tool', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='mcp', to='tools_app.tool')),
                    ],
                    options={
                        'verbose_name': 'MCP tool',
                        'db_table': 'tools_app_mcptool',
                        'ordering': ['server__slug', 'upstream_name'],
                        'indexes': [models.Index(fields=['status'], name='mcptool_status')],
                        'constraints': [models.UniqueConstraint(fields=('server', 'upstream_name'), name='mcptool_unique_name_per_server'), models.CheckConstraint(condition=models.Q(models.Q(('status', 'approved'), _negated=True), models.Q(('approved_hash', ''), _negated=True), _connector='OR'), name='mcptool_approved_has_hash')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
