"""The controller and the garbage collector (docs/benchmarks.md, "Where the CPU goes
(sampled)"): the CLI's server freezes its start-up heap once it serves, so that full
collections no longer walk the start-up's objects, and raises the young generation's
threshold (an embedded controller leaves its host's collector alone); a fast-path call leaves
no reference cycle behind for the collector."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import weakref

import httpx
import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_controller.service.http.server import YOUNG_GC_THRESHOLD, freeze_startup_heap
from agentrt_serving.direct import DirectExchange

from .conftest import fake_backends
from .fake_openai import FakeState

pytestmark = pytest.mark.timeout(60)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_freezing_collects_the_start_ups_garbage_then_freezes_what_is_left() -> None:
    before = gc.get_freeze_count()
    thresholds = gc.get_threshold()
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
        assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, *thresholds[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


# The real server in its own process: the banner is printed once the server serves, after
# the freeze; it reports the freeze count and stops the server (SIGINT: it drains and exits).
_SERVE = """
import gc, os, signal
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.http.server import run_controller

def banner(port):
    os.kill(os.getpid(), signal.SIGINT)
    return f"frozen={gc.get_freeze_count()} young={gc.get_threshold()[0]}"

config = ControllerConfig(port=0, backends=(BackendSpec("http://127.0.0.1:9"),))
run_controller(config, banner)
"""


def test_the_cli_server_freezes_its_heap_once_it_serves() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SERVE], capture_output=True, text=True, timeout=45, check=False
    )
    assert done.returncode == 0, done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if "frozen=" in ln]
    frozen, young = line.rsplit("frozen=", 1)[1].split(" young=")
    assert int(frozen) > 10_000  # modules, code, the app
    assert int(young) == YOUNG_GC_THRESHOLD


@pytest.mark.anyio
async def test_an_embedded_controller_leaves_its_hosts_collector_alone() -> None:
    before = gc.get_freeze_count()
    thresholds = gc.get_threshold()
    async with fake_backends(FakeState()) as urls:
        config = ControllerConfig(port=0, backends=(BackendSpec(urls[0]),))
        async with serve_controller(config) as url, httpx.AsyncClient() as http:
            assert (await http.get(url + "/health")).status_code == 200
    assert gc.get_freeze_count() == before and gc.get_threshold() == thresholds


def test_a_fast_path_exchange_is_in_no_reference_cycle() -> None:
    transport = asyncio.Transport()
    exchange = DirectExchange(
        method="POST", path="/v1/chat/completions", headers=[(b"content-length", b"2")],
        client=("127.0.0.1", 1), transport=transport, flow=FlowControl(transport),
        default_headers=[], keep_alive=True, expect_100_continue=False, on_response=lambda: None,
    )  # fmt: skip
    assert exchange.message_event is exchange  # what uvicorn's protocol wakes
    # freed by its reference count alone: nothing it holds leads back to it
    seen: set[int] = set()
    todo = list(gc.get_referents(exchange))
    while todo:
        obj = todo.pop()
        assert obj is not exchange
        if id(obj) not in seen and not isinstance(obj, type):
            seen.add(id(obj))
            todo.extend(gc.get_referents(obj))
