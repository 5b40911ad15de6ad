"""Lazy package exports (PEP 562): a package's public names imported on first access.

Used by ``agentrt`` and ``agentrt.journal`` so that the ``agentrt`` command can register its
command groups without importing openai, httpx, OpenTelemetry or SQLAlchemy.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def exports(
    package: str, lazy: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``lazy`` maps a public name to the module
    defining it; the first access imports that module and caches the value in the package."""

    def __getattr__(name: str) -> object:
        module_name = lazy.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *lazy})

    return __getattr__, __dir__
