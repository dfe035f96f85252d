"""Argument rules and result guards (policies_app/rules.py), and `subject` as the approver of a rule's confirmation.

Self-contained: two new tables and a wider choice list on approval requests;
nothing else of the app changes.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('policies_app', '0009_governance_row_changes_counter'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='approvalrequest',
            name='approver',
            field=models.CharField(choices=[('operator', 'Operators (admin, manage.py approvals)'), ('tenant_owner', "The tenant's owners (tenant UI), and operators"), ('subject', 'The person the call is for, and operators')], default='operator', max_length=16),
        ),
        migrations.CreateModel(
            name='ArgumentRule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.SlugField(max_length=100, unique=True)),
                ('tools', models.JSONField(blank=True, default=list, help_text='Tool ids or patterns with *, e.g. github__*.')),
                ('tags', models.JSONField(blank=True, default=list, help_text='Tool tags: the rule covers every tool with one.')),
                ('message', models.CharField(blank=True, help_text='What the model reads when this rule acts. Never put a secret here.', max_length=500)),
                ('is_active', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('condition', models.TextField(help_text="CEL, true when the rule applies, e.g. !args.repo.startsWith('acme/').")),
                ('action', models.CharField(choices=[('deny', 'Deny'), ('require_approval', "Require approval (the policy's approvers)"), ('require_confirmation', 'Require confirmation (the person the call is for)'), ('allow', "Allow (an exception to a broader scope's deny)")], max_length=24)),
                ('service_account', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='policies_app.serviceaccount')),
                ('tenant', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='policies_app.tenant')),
                ('updated_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['name'],
                'abstract': False,
                'constraints': [models.CheckConstraint(condition=models.Q(('service_account__isnull', True), ('tenant__isnull', False), _connector='OR'), name='argumentrule_service_account_needs_tenant'), models.CheckConstraint(condition=models.Q(('action__in', ['deny', 'require_approval', 'require_confirmation', 'allow'])), name='argumentrule_action_known')],
            },
        ),
        migrations.CreateModel(
            name='ResultGuard',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.SlugField(max_length=100, unique=True)),
                ('tools', models.JSONField(blank=True, default=list, help_text='Tool ids or patterns with *, e.g. github__*.')),
                ('tags', models.JSONField(blank=True, default=list, help_text='Tool tags: the rule covers every tool with one.')),
                ('message', models.CharField(blank=True, help_text='What the model reads when this rule acts. Never put a secret here.', max_length=500)),
                ('is_active', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('detectors', models.JSONField(blank=True, default=list, help_text='Built-in detectors: aws_access_key, aws_secret_key, private_key.')),
                ('patterns', models.JSONField(blank=True, default=list, help_text='Extra regular expressions (RE2 syntax), one secret kind each.')),
                ('action', models.CharField(choices=[('redact', 'Redact each match'), ('withhold', 'Withhold the result (a tool error the model reads)'), ('record', 'Only record it in the audit')], default='redact', max_length=16)),
                ('service_account', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='policies_app.serviceaccount')),
                ('tenant', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='policies_app.tenant')),
                ('updated_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['name'],
                'abstract': False,
                'constraints': [models.CheckConstraint(condition=models.Q(('service_account__isnull', True), ('tenant__isnull', False), _connector='OR'), name='resultguard_service_account_needs_tenant'), models.CheckConstraint(condition=models.Q(('action__in', ['redact', 'withhold', 'record'])), name='resultguard_action_known')],
            },
        ),
    ]
