from django.apps import AppConfig


class PolicyFilesConfig(AppConfig):
    """Policy as code: the whole governance state as one JSON file (`manage.py policy export|import`).

    It sits just below `config`, above every domain app, because the file holds
    sections of several of them (tools and their switches, policies, toolsets,
    rules, single sign-on role mappings); no domain app imports it.
    """

    name = "policy_files"
    verbose_name = "Policy files"
