"""The MCP gateway's models leave tools_app's state for the gateway app's; their tables stay as they are.

State only (gateway/migrations/0001_mcp_models_from_tools_app.py takes them up with the same `db_table`): no table is
rebuilt and no row is copied.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("tools_app", "0020_invocation_cancelled"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="mcpfeatureread",
                    name="service_account",
                ),
                migrations.RemoveField(
                    model_name="mcpfeatureread",
                    name="tenant",
                ),
                migrations.RemoveField(
                    model_name="mcptool",
                    name="server",
                ),
                migrations.RemoveField(
                    model_name="mcptool",
                    name="approved_by",
                ),
                migrations.RemoveField(
                    model_name="mcptool",
                    name="effect_confirmed_by",
                ),
                migrations.RemoveField(
                    model_name="mcptool",
                    name="tool",
                ),
                migrations.DeleteModel(
                    name="McpFeature",
                ),
                migrations.DeleteModel(
                    name="McpFeatureRead",
                ),
                migrations.DeleteModel(
                    name="McpServer",
                ),
                migrations.DeleteModel(
                    name="McpTool",
                ),
            ],
            database_operations=[],
        ),
    ]
