"""The audit row names the argument rule that decided a call and what the result guards found.

Plain AddFields: on PostgreSQL the audit table is partitioned (0009), and
ALTER TABLE ... ADD COLUMN on the parent adds the column to every partition,
the default one included. The columns are nullable or blank with no index,
so no partition is rewritten and the audit INSERT keeps its plan.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0015_mcpserver_packages_and_binds'),
    ]

    operations = [
        migrations.AddField(
            model_name='toolinvocation',
            name='guardrail',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='toolinvocation',
            name='rule_action',
            field=models.CharField(blank=True, max_length=24),
        ),
        migrations.AddField(
            model_name='toolinvocation',
            name='rule_id',
            field=models.CharField(blank=True, max_length=64),
        ),
    ]
