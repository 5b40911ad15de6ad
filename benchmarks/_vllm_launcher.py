"""scripts/vllm/server.py (the real-vLLM launcher, stdlib only; see docs/real-vllm.md) as a
module, for the benchmarks that start real vLLM servers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
#: The name it is registered under in ``sys.modules`` (its dataclasses look it up there).
MODULE_NAME = "agentrt_vllm_launcher"


def load_launcher() -> ModuleType:
    """The launcher module, loaded once per process."""
    if MODULE_NAME in sys.modules:
        return sys.modules[MODULE_NAME]
    spec = importlib.util.spec_from_file_location(
        MODULE_NAME, ROOT / "scripts" / "vllm" / "server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
