"""``import agentrt_adapters`` needs neither framework; ``available()`` says what is installed."""

from __future__ import annotations

import subprocess
import sys

import agentrt_adapters


def test_importing_the_package_imports_no_framework() -> None:
    code = (
        "import sys, agentrt_adapters; "
        "names = ('langchain_core', 'langgraph', 'autogen_core', 'agents', 'pydantic_ai', "
        "'agent_framework'); "
        "print([m for m in names if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_available_reports_the_installed_extras() -> None:
    found = agentrt_adapters.available()
    # Each adapter and the modules whose import says whether its extra is installed.
    modules = {
        "langchain": ("langgraph",),
        "autogen": ("autogen_agentchat",),
        "agent_framework": ("agent_framework", "agent_framework_openai"),
        "openai_agents": ("agents",),
        "pydantic_ai": ("pydantic_ai",),
    }
    assert set(found) == set(modules)
    for name, ok in found.items():
        try:
            for module in modules[name]:
                __import__(module)
            importable = True
        except ImportError:
            importable = False
        assert ok == importable
