"""The built-in tool modules. A new tool is a module here plus one line below."""

from tools_app.tools import get_current_time, github, search_tools, wait

BUILTIN_TOOLS = (
    get_current_time.TOOL,
    wait.TOOL,
    github.GET_USER,
    github.CREATE_ISSUE,
    search_tools.TOOL,
)
