"""``import agentrt_adapters`` needs neither framework; ``available()`` says what is installed."""

from __future__ import annotations

import subprocess
import sys

import agentrt_adapters


def test_importing_the_package_imports_no_framework() -> None:
    code = (
        "import sys, agentrt_adapters; "
        "names = ('langchain_core', 'langgraph', 'autogen_core', 'agents', 'pydantic_ai'); "
        "print([m for m in names if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_available_reports_the_installed_extras() -> None:
    found = agentrt_adapters.available()
    assert {"langchain", "autogen", "openai_agents", "pydantic_ai"} <= set(found)
    modules = {
        "langchain": "langgraph",
        "autogen": "autogen_agentchat",
        "openai_agents": "agents",
        "pydantic_ai": "pydantic_ai",
    }
    for name, ok in found.items():
        if name not in modules:  # another adapter's entry, checked by its own test
            continue
        module = modules[name]
        try:
            __import__(module)
            importable = True
        except ImportError:
            importable = False
        assert ok == importable
