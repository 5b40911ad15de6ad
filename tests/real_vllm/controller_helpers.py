"""Helpers for tests that run the controller in front of a REAL vLLM (tests/real_vllm).

* :func:`controller_for` — ``serve_controller`` around one real server, with the app at hand;
* :func:`program_headers` — the agentrt call tags of a program (what the SDK would send);
* :func:`queued_completion_order` — the deterministic queue-order experiment: fill vLLM's two
  batch slots, queue more calls while the engine is paused (vLLM's dev endpoint
  ``/pause?mode=keep``), resume, and report the order in which the queued calls complete;
* :func:`wait_until` — poll a condition with a deadline (no sleeps used as measurements).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx
from openai import AsyncOpenAI
from opentelemetry.trace import TracerProvider

from agentrt.protocol import HEADER_NODE_ID, HEADER_PROGRAM_ID, HEADER_SESSION_ID
from agentrt_controller.backends import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_controller.service.http.app import ControllerApp

T = TypeVar("T")

#: Session (tenant) id used by the tagged calls of these tests.
SESSION = "real-vllm-tests"
#: Fillers that take both batch slots of a ``--max-num-seqs 2`` server: (name, max_tokens).
#: F2 outlasts F1 plus the queued calls (300 + 3 x 64 < 600 decode steps), so the queued calls
#: run one at a time, 64 tokens apart, and their completions cannot race on the way back.
FILLERS = (("F1", 300), ("F2", 600))
#: Output tokens of each queued call.
QUEUED_TOKENS = 64


@dataclass
class Controller:
    """A running controller: its base URL (no ``/v1``) and the app object."""

    url: str
    app: ControllerApp

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    @property
    def backend_id(self) -> str:
        (backend_id,) = self.app.core.pool.states
        return backend_id

    async def get(self, path: str) -> Any:
        async with httpx.AsyncClient(timeout=30.0) as http:
            response = await http.get(self.url + path)
        response.raise_for_status()
        return response.json()

    async def metrics_text(self) -> str:
        async with httpx.AsyncClient(timeout=30.0) as http:
            response = await http.get(self.url + "/metrics")
        response.raise_for_status()
        return response.text


@contextlib.asynccontextmanager
async def controller_for(
    server: Any,
    *,
    priority: bool,
    tracer_provider: TracerProvider | None = None,
    **config: Any,
) -> AsyncIterator[Controller]:
    """A controller with ``server`` (a ``RunningServer``) as its only backend (kind vllm).

    ``priority`` is the backend's explicit switch (never ``auto``: an FCFS vLLM accepts the
    field and ignores it, docs/real-vllm.md); ``config`` are further ControllerConfig fields.
    """
    apps: list[ControllerApp] = []
    backend = BackendSpec(server.base_url, kind="vllm", priority=priority)
    settings = ControllerConfig(port=0, backends=(backend,), **config)
    serving = serve_controller(settings, on_app=apps.append, tracer_provider=tracer_provider)
    async with serving as url:
        yield Controller(url, apps[0])


def client_for(base_url: str) -> AsyncOpenAI:
    """An openai client without retries (a retry would hide what the server did)."""
    return AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120.0)


def program_headers(program_id: str, node: int = 0) -> dict[str, str]:
    """The call tags of call ``node`` of ``program_id`` (thread ``main``)."""
    return {
        HEADER_SESSION_ID: SESSION,
        HEADER_PROGRAM_ID: program_id,
        HEADER_NODE_ID: f"main:{node}",
    }


async def wait_until(
    probe: Callable[[], Awaitable[T]],
    ok: Callable[[T], bool],
    timeout_s: float,
    what: str,
    interval_s: float = 0.02,
) -> T:
    """Call ``probe`` until ``ok(value)``; raise AssertionError after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await probe()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}: {value!r}")
        await anyio.sleep(interval_s)


async def queued_completion_order(
    server: Any,
    controller: Controller,
    queued: Sequence[tuple[str, str]],
    *,
    held_at_controller: int,
) -> list[str]:
    """Send FILLERS, then ``queued`` = [(name, program_id)...] in that order, all through the
    controller, while vLLM's engine is paused; resume; return the queued calls' completion
    order.

    ``held_at_controller``: how many of the queued calls the controller's admission window
    keeps in its own queues (0 with a large window: every call reaches vLLM's queue). The
    engine is resumed only when the controller shows exactly that state, so the outcome does
    not depend on how busy this machine is. Fillers are untagged (fresh one-call programs).
    """
    assert server.max_num_seqs == 2
    finished: list[str] = []
    forwarded = len(FILLERS) + len(queued) - held_at_controller

    async def send(client: AsyncOpenAI, name: str, tokens: int, headers: dict[str, str]) -> None:
        await client.completions.create(
            model=server.model,
            prompt=f"request {name}",
            max_tokens=tokens,
            extra_body={"ignore_eos": True},
            extra_headers=headers,
        )
        finished.append(name)

    async def controller_state() -> tuple[int, int]:
        queues = await controller.get("/agentrt/v1/queues")
        return queues["backends"][0]["in_flight"], queues["queued"]

    async with (
        client_for(controller.openai_url) as client,
        httpx.AsyncClient(timeout=30.0) as http,
    ):
        (await http.post(server.base_url + "/pause", params={"mode": "keep"})).raise_for_status()
        try:
            async with anyio.create_task_group() as tg:
                for name, tokens in FILLERS:
                    tg.start_soon(send, client, name, tokens, {})
                    await anyio.sleep(0.1)  # arrival order as listed
                for name, program_id in queued:
                    tg.start_soon(send, client, name, QUEUED_TOKENS, program_headers(program_id))
                    await anyio.sleep(0.1)
                await wait_until(
                    controller_state,
                    lambda state: state == (forwarded, held_at_controller),
                    60,
                    "all calls at the controller (in flight, queued)",
                )
                # Let the last forwarded call reach vLLM's queue; even a late one only needs
                # to arrive within F1's 300 decode steps.
                await anyio.sleep(0.5)
                (await http.post(server.base_url + "/resume")).raise_for_status()
        finally:
            await http.post(server.base_url + "/resume")
    return [name for name in finished if not name.startswith("F")]
