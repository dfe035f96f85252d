"""The sign-in models now belong to the signin app (its migration 0001): only the state forgets them here."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("policies_app", "0014_result_guard_arguments"),
        ("signin", "0001_signin_models_live_here"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="SigninToken"),
                migrations.DeleteModel(name="SigninCode"),
                migrations.DeleteModel(name="SigninGrant"),
                migrations.DeleteModel(name="SigninClient"),
            ]
        ),
    ]
