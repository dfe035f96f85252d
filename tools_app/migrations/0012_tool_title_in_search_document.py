"""A tool's title in its search document, with the id's weight.

The title is a column of the tool row now (`Tool.title`: a code tool's from
its contract, written by `sync_tools`; an upstream tool's from the definition
the row mirrors, written by discovery and approval like its description), so
the document stays a generated column over the row: whatever writes the title
updates the document in the same statement. Upstream rows get their title
from the definition they mirror here; code rows at the next `sync_tools`.

PostgreSQL cannot change a generated column's expression before version 17:
the column and its GIN index are dropped and added again.
"""

from django.db import migrations, models

PREVIOUS_DOCUMENT = """
    setweight(to_tsvector('english'::regconfig, translate(id, '_-', '  ')), 'A')
    || setweight(to_tsvector('english'::regconfig, translate(coalesce(tags::text, ''), '_-', '  ')), 'B')
    || setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'C')
"""
DOCUMENT = """
    setweight(to_tsvector('english'::regconfig, translate(id, '_-', '  ')), 'A')
    || setweight(to_tsvector('english'::regconfig, coalesce(title, '')), 'A')
    || setweight(to_tsvector('english'::regconfig, translate(coalesce(tags::text, ''), '_-', '  ')), 'B')
    || setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'C')
"""


def _document(schema_editor, expression):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP INDEX IF EXISTS tool_search_document_gin")
    schema_editor.execute("ALTER TABLE tools_app_tool DROP COLUMN IF EXISTS search_document")
    schema_editor.execute(
        f"ALTER TABLE tools_app_tool ADD COLUMN search_document tsvector GENERATED ALWAYS AS ({expression}) STORED"
    )
    schema_editor.execute("CREATE INDEX tool_search_document_gin ON tools_app_tool USING gin (search_document)")


def upstream_titles(apps, schema_editor):
    tool_model = apps.get_model("tools_app", "Tool")
    mcp_tool_model = apps.get_model("tools_app", "McpTool")
    for tool_id, definition in mcp_tool_model.objects.values_list("tool_id", "live_definition").iterator():
        title = definition.get("title") if isinstance(definition, dict) else None
        if isinstance(title, str) and title:
            tool_model.objects.filter(pk=tool_id).update(title=title)


def forwards(apps, schema_editor):
    _document(schema_editor, DOCUMENT)


def backwards(apps, schema_editor):
    _document(schema_editor, PREVIOUS_DOCUMENT)


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0011_tool_search_document")]

    operations = [
        migrations.AddField(model_name="tool", name="title", field=models.TextField(blank=True, default="")),
        migrations.RunPython(upstream_titles, migrations.RunPython.noop, elidable=True),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
