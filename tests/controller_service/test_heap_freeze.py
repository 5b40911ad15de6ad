"""The CLI's server freezes its start-up heap once it serves (docs/benchmarks.md, "Where the
CPU goes (sampled)"): the collector's full collections no longer walk the start-up's objects;
an embedded controller leaves its host's collector alone."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import httpx
import pytest

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_controller.service.http.server import freeze_startup_heap

from .conftest import fake_backends
from .fake_openai import FakeState

pytestmark = pytest.mark.timeout(60)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_freezing_collects_the_start_ups_garbage_then_freezes_what_is_left() -> None:
    before = gc.get_freeze_count()
    first, second = _Node(), _Node()
    first.other, second.other = second, first  # a cycle only the collector frees
    dead = weakref.ref(first)
    kept = _Node()
    del first, second
    try:
        freeze_startup_heap()
        assert dead() is None
        assert gc.get_freeze_count() > before
        assert kept.other is None
    finally:
        gc.unfreeze()


# The real server in its own process: the banner is printed once the server serves, after
# the freeze; it reports the freeze count and stops the server (SIGINT: it drains and exits).
_SERVE = """
import gc, os, signal
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.http.server import run_controller

def banner(port):
    os.kill(os.getpid(), signal.SIGINT)
    return f"frozen={gc.get_freeze_count()}"

config = ControllerConfig(port=0, backends=(BackendSpec("http://127.0.0.1:9"),))
run_controller(config, banner)
"""


def test_the_cli_server_freezes_its_heap_once_it_serves() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SERVE], capture_output=True, text=True, timeout=45, check=False
    )
    assert done.returncode == 0, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if "frozen=" in ln]
    assert int(line.rsplit("frozen=", 1)[1]) > 10_000  # modules, code, the app


@pytest.mark.anyio
async def test_an_embedded_controller_leaves_its_hosts_collector_alone() -> None:
    before = gc.get_freeze_count()
    async with fake_backends(FakeState()) as urls:
        config = ControllerConfig(port=0, backends=(BackendSpec(urls[0]),))
        async with serve_controller(config) as url, httpx.AsyncClient() as http:
            assert (await http.get(url + "/health")).status_code == 200
    assert gc.get_freeze_count() == before
