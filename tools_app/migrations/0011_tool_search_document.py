"""Tool search: a full-text document per tool, kept current by PostgreSQL itself.

A stored generated column: whatever writes a tool row (the code sync, upstream
discovery, an approved definition, an operator's tags) updates the document in
the same statement, so search can never lag the catalog. Weights: the id
(split at `_`/`-`) is A, the tags B, the description C. A GIN index serves the
`@@` match. The column is PostgreSQL's alone: the model does not declare it,
and the embedded SQLite default searches with the plain fallback instead
(tools_app/search.py).
"""

from django.db import migrations

DOCUMENT = """
    setweight(to_tsvector('english'::regconfig, translate(id, '_-', '  ')), 'A')
    || setweight(to_tsvector('english'::regconfig, translate(coalesce(tags::text, ''), '_-', '  ')), 'B')
    || setweight(to_tsvector('english'::regconfig, coalesce(description, '')), 'C')
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"ALTER TABLE tools_app_tool ADD COLUMN search_document tsvector GENERATED ALWAYS AS ({DOCUMENT}) STORED"
    )
    schema_editor.execute("CREATE INDEX tool_search_document_gin ON tools_app_tool USING gin (search_document)")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("DROP INDEX IF EXISTS tool_search_document_gin")
    schema_editor.execute("ALTER TABLE tools_app_tool DROP COLUMN IF EXISTS search_document")


class Migration(migrations.Migration):
    dependencies = [("tools_app", "0010_toolset")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
