"""A tenant that asks for many sequences per call cannot take the backends from another.

The hostile-client probe of issue [hardening] item 3, scaled down: tenant ``bob`` keeps
``CONNECTIONS`` connections busy with calls of ``n`` = ``N`` while tenant ``alice`` makes
ordinary calls, against two emulators (each on its own event loop, as two processes) behind a
default controller. When the admission window counted calls, each emulator got a window's worth
of such calls — the batch size times ``n`` sequences — its health probes timed out, both circuits
opened and ``alice`` got 503 ``no_backend``. The window counts sequences now: an engine never
holds more than its batch (plus ``target_waiting``) of our sequences, and ``alice`` is answered.

Run as a script for the figures: ``python -m tests.security.test_sequences_flood [seconds
[connections n batch max_tokens]]`` (the defaults are the test's).
"""

from __future__ import annotations

import collections
import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.from_thread import start_blocking_portal

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_controller.service.core.tenants import hash_key
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import EmulatorConfig, serve_engine

from .stack import MODEL

#: The hostile tenant's connections, the sequences each of its calls asks for and its
#: ``max_tokens``.
CONNECTIONS = 8
N = 32
MAX_TOKENS = 512
#: The emulators' batch (``max_num_seqs``): the controller's cap on ``n`` by default.
BATCH = 32
#: The adaptive window's default ``target_waiting``.
TARGET_WAITING = 2


@dataclass(frozen=True)
class Scenario:
    """The flood's size."""

    connections: int = CONNECTIONS
    n: int = N
    batch: int = BATCH
    max_tokens: int = MAX_TOKENS


KEYS = {"alice": "key-alice-0001", "bob": "key-bob-0002"}


@dataclass
class Figures:
    """What one run saw."""

    #: Answers by HTTP status, per tenant (0: none within the client's time-out).
    statuses: dict[str, collections.Counter[int]] = field(
        default_factory=lambda: {name: collections.Counter() for name in KEYS}
    )
    #: Latencies of alice's calls (seconds).
    victim_latency_s: list[float] = field(default_factory=list)
    #: Most sequences an emulator held at once (running + waiting, from its /metrics).
    peak_engine_sequences: int = 0
    #: Circuits opened in the controller, all backends.
    circuits_opened: int = 0

    def summary(self) -> str:
        lat = sorted(self.victim_latency_s) or [0.0]
        return (
            f"alice {dict(self.statuses['alice'])} p50 {lat[len(lat) // 2]:.3f} s max "
            f"{lat[-1]:.3f} s; bob {dict(self.statuses['bob'])}; peak engine sequences "
            f"{self.peak_engine_sequences}; circuits opened {self.circuits_opened}"
        )


@contextlib.contextmanager
def _servers(tmp: Path, batch: int) -> Iterator[tuple[list[str], str, ControllerApp]]:
    """Two emulators with a batch of ``batch``, and a default controller with two
    tenants in front, each on its own event loop (thread)."""
    keys = tmp / "keys.toml"
    keys.write_text(
        "".join(f'[tenants.{n}]\nkeys = ["{hash_key(k)}"]\n' for n, k in KEYS.items()),
        encoding="utf-8",
    )
    engine = EmulatorConfig(
        engine=EngineConfig(num_gpu_blocks=16384, max_num_seqs=batch), time_scale=20.0
    )
    apps: list[ControllerApp] = []
    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(2):
            portal = stack.enter_context(start_blocking_portal())
            urls.append(stack.enter_context(portal.wrap_async_context_manager(
                serve_engine(engine))).base_url)  # fmt: skip
        backends = tuple(BackendSpec.parse(u + ",kind=emulator") for u in urls)
        config = ControllerConfig(
            port=0, backends=backends, api_key_file=str(keys), scrape_interval_s=0.25
        )
        portal = stack.enter_context(start_blocking_portal())
        url = stack.enter_context(
            portal.wrap_async_context_manager(serve_controller(config, on_app=apps.append))
        )
        yield urls, url, apps[0]


def _body(n: int, max_tokens: int) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "write a long story " * 8}],
        "n": n,
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }


async def _engine_load(http: httpx.AsyncClient, url: str) -> int:
    text = (await http.get(url + "/metrics")).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


async def flood(tmp: Path, seconds: float, scenario: Scenario = Scenario()) -> Figures:
    """Run ``scenario`` for ``seconds`` and return what it saw."""
    figures = Figures()
    with _servers(tmp, scenario.batch) as (engines, url, app):
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(timeout=30, limits=limits) as http:
            end = time.monotonic() + seconds

            async def call(tenant: str, n: int, max_tokens: int) -> None:
                auth = {"authorization": f"Bearer {KEYS[tenant]}"}
                start = time.monotonic()
                try:
                    answer = await http.post(url + "/v1/chat/completions",
                                             json=_body(n, max_tokens), headers=auth)  # fmt: skip
                except httpx.TimeoutException:
                    figures.statuses[tenant][0] += 1  # 0: no answer within the client's 30 s
                    return
                figures.statuses[tenant][answer.status_code] += 1
                if tenant == "alice":
                    figures.victim_latency_s.append(time.monotonic() - start)

            async def hostile() -> None:
                while time.monotonic() < end:
                    await call("bob", scenario.n, scenario.max_tokens)

            async def victim() -> None:
                await anyio.sleep(0.5)  # bob's calls first
                while time.monotonic() < end:
                    await call("alice", 1, 8)

            async def watch() -> None:
                while time.monotonic() < end:
                    for engine in engines:
                        with contextlib.suppress(httpx.HTTPError):
                            load = await _engine_load(http, engine)
                            figures.peak_engine_sequences = max(figures.peak_engine_sequences, load)
                    await anyio.sleep(0.1)

            async with anyio.create_task_group() as group:
                for _ in range(scenario.connections):
                    group.start_soon(hostile)
                group.start_soon(victim)
                group.start_soon(watch)
        figures.circuits_opened = sum(
            state.breaker.opened_total for state in app.core.pool.states.values()
        )
    return figures


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_many_sequences_per_call_do_not_take_the_backends_from_another_tenant(
    tmp_path: Path,
) -> None:
    figures = await flood(tmp_path, 4.0)
    summary = figures.summary()
    assert figures.circuits_opened == 0, summary
    assert set(figures.statuses["alice"]) == {200}, summary
    assert figures.statuses["alice"][200] >= 3, summary
    assert set(figures.statuses["bob"]) == {200}, summary
    # The window bounds an engine's sequences by its batch plus target_waiting (the emulator
    # counts each of a call's sequences as a request). Counting calls, it held 97 here.
    assert figures.peak_engine_sequences <= BATCH + TARGET_WAITING, summary


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        seconds = float(sys.argv[1]) if sys.argv[1:] else 4.0
        sizes = Scenario(*map(int, sys.argv[2:6])) if sys.argv[2:] else Scenario()
        result = anyio.run(flood, Path(directory), seconds, sizes)
    print(result.summary())
