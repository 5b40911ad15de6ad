"""A controller restarted in place loses no program (docs/sdk.md, "Retries"; docs/controller.md,
"Lifecycle").

500 short SDK programs (1–3 calls each, many at once) run through ``agentrt controller serve``
in front of an in-process emulator; after a fifth of them, the controller is stopped — SIGTERM
(it drains: refuses new connections, answers 503 ``draining`` with ``Retry-After`` on those
still open, finishes its calls, exits 0) or SIGKILL — and a new one is started on the same port
half a second after the old one is gone. The programs caught in the gap wait: the SDK resends
what the server never took (connection refused, 503 + ``Retry-After``) within its retry budget.
Every program finishes, and some provably ran across the gap.
"""

from __future__ import annotations

import signal

import anyio
import httpx
import pytest
from anyio.abc import TaskStatus

import agentrt
from agentrt import Runtime, RuntimeConfig
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.ops.processes import controller_process, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PROGRAMS = 500
#: Programs running at once (the rest wait their turn).
CONCURRENT = 64
#: The controller is stopped once this many programs have finished.
STOP_AFTER = PROGRAMS // 5
#: Seconds between the old controller's exit and the new one's start.
GAP_S = 0.5
#: Emulated model time runs this much faster than real time: a call takes milliseconds.
TIME_SCALE = 50.0
HI = [{"role": "user", "content": "hi"}]
#: The scrape interval is also each health probe's time limit (the pool caps a probe at one
#: interval, docs/controller.md): 5 s, with the backend's own limit above it (below).
OPTIONS = ("--shutdown-grace-s", "5", "--scrape-interval-s", "5")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_programs_run_through_a_controller_restart(stop: signal.Signals) -> None:
    port = free_port()
    stop_now = anyio.Event()
    all_done = anyio.Event()
    #: anyio-clock times: the old controller stopped, the new one answers.
    stopped_at: list[float] = []
    back_at: list[float] = []
    exit_codes: list[int] = []

    async def controllers(backend: str, *, task_status: TaskStatus[None]) -> None:
        async with controller_process([backend], *OPTIONS, port=port) as (first, _):
            task_status.started()
            await stop_now.wait()
            stopped_at.append(anyio.current_time())
            first.send_signal(stop)
            with anyio.fail_after(20):
                exit_codes.append(await first.wait())
        await anyio.sleep(GAP_S)
        async with controller_process([backend], *OPTIONS, port=port):
            back_at.append(anyio.current_time())
            await all_done.wait()

    failures: list[str] = []
    #: (start, end) of every program on the anyio clock.
    spans: list[tuple[float, float]] = []
    slots = anyio.Semaphore(CONCURRENT)

    async def program(rt: Runtime, index: int) -> None:
        async with slots:
            start = anyio.current_time()
            try:
                async with rt.program(f"restart-{index}", timeout_s=60):
                    for _ in range(1 + index % 3):
                        await agentrt.chat(HI, max_tokens=8, runtime=rt)
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
            spans.append((start, anyio.current_time()))
            if len(spans) == STOP_AFTER:
                stop_now.set()

    async with (
        serve_engine(EmulatorConfig(time_scale=TIME_SCALE)) as engine,
        anyio.create_task_group() as group,
    ):
        # The emulator shares this process with the 64 programs: on a loaded machine its
        # health answers can take seconds, and three probes timed out in a row take it out of
        # routing (503 "no healthy backend"). A probe's limit is the smaller of the scrape
        # interval and the backend's probe_timeout_s (at the tests' 0.2 s interval, three
        # late answers in 1.2 s did it in CI). This test is about the controller's restart,
        # not the backend's health: give the probes room, 5 s each (OPTIONS).
        await group.start(controllers, f"{engine.base_url},probe_timeout_s=30")
        config = RuntimeConfig(base_url=f"http://127.0.0.1:{port}/v1", model=DEFAULT_MODEL_NAME)
        async with Runtime(config) as rt, anyio.create_task_group() as programs:
            for index in range(PROGRAMS):
                programs.start_soon(program, rt, index)
        all_done.set()

    assert failures == [], f"{len(failures)} of {PROGRAMS} programs failed: {failures[:3]}"
    assert len(spans) == PROGRAMS
    if stop == signal.SIGTERM:
        assert exit_codes == [0]  # drained, not killed
    across = [s for s in spans if s[0] < stopped_at[0] and s[1] > back_at[0]]
    assert across, "no program ran across the restart: the test did not exercise the gap"


async def test_a_draining_controller_answers_new_calls_503_with_retry_after() -> None:
    apps: list[ControllerApp] = []
    async with serve_engine(EmulatorConfig(time_scale=TIME_SCALE)) as engine:
        backends = (BackendSpec(engine.base_url, kind="emulator"),)
        config = ControllerConfig(port=0, backends=backends, retry_after_s=2)
        async with serve_controller(config, on_app=apps.append) as url, httpx.AsyncClient() as http:
            body = {"model": DEFAULT_MODEL_NAME, "messages": HI, "max_tokens": 4}
            assert (await http.post(url + "/v1/chat/completions", json=body)).status_code == 200
            apps[0].draining = True
            answer = await http.post(url + "/v1/chat/completions", json=body)
            assert answer.status_code == 503
            assert answer.headers["retry-after"] == "2"
            assert answer.headers["connection"] == "close"
            assert answer.json()["error"]["code"] == "draining"
            assert (await http.get(url + "/v1/models")).status_code == 503
            assert (await http.get(url + "/readyz")).status_code == 503
            assert (await http.get(url + "/livez")).status_code == 200
    assert sum(engine.state.driver.metrics.success.values()) == 1  # the 503 reached no engine
