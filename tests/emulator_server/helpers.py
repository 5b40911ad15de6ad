"""Helpers for the emulator's HTTP tests: real uvicorn servers on loopback ports."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from openai import AsyncOpenAI

from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import (
    DEFAULT_MODEL_NAME,
    EmulatorConfig,
    RunningEmulator,
    serve_engine,
)

MODEL = DEFAULT_MODEL_NAME


def make_config(time_scale: float = 200.0, **engine: Any) -> EmulatorConfig:
    """A test server config: fast clock and a small KV cache unless told otherwise."""
    engine.setdefault("num_gpu_blocks", 2048)
    return EmulatorConfig(engine=EngineConfig(**engine), time_scale=time_scale)


@asynccontextmanager
async def running(config: EmulatorConfig | None = None) -> AsyncIterator[RunningEmulator]:
    async with serve_engine(config or make_config()) as engine:
        yield engine


def client(engine: RunningEmulator) -> AsyncOpenAI:
    """An official client for ``engine``; use it as ``async with`` so its sockets close."""
    return AsyncOpenAI(base_url=engine.openai_base_url, api_key="unused", max_retries=0)


@asynccontextmanager
async def serving(
    config: EmulatorConfig | None = None,
) -> AsyncIterator[tuple[RunningEmulator, AsyncOpenAI]]:
    """A running server and an official ``openai`` client for it."""
    async with serve_engine(config or make_config()) as engine, client(engine) as openai:
        yield engine, openai


def metric(text: str, name: str, labels: str = "") -> float:
    """Value of one sample in a Prometheus text body."""
    pattern = re.escape(name) + r"\{[^}]*" + re.escape(labels) + r"[^}]*\} (\S+)"
    match = re.search(pattern, text)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


async def scrape(engine: RunningEmulator) -> str:
    async with httpx.AsyncClient() as http:
        response = await http.get(engine.base_url + "/metrics")
    assert response.status_code == 200
    return response.text


async def poll_until(
    condition: Callable[[], Awaitable[bool]], timeout_s: float = 10, interval_s: float = 0.005
) -> None:
    """Await ``condition()`` until it is true; fails after ``timeout_s`` wall seconds.

    Observing a server from outside has no event to wait on: polling is the honest tool.
    """
    with anyio.fail_after(timeout_s):
        while not await condition():  # noqa: ASYNC110
            await anyio.sleep(interval_s)


async def wait_metric(
    engine: RunningEmulator, name: str, wanted: float, timeout_s: float = 10
) -> None:
    """Poll /metrics until ``name`` equals ``wanted``."""

    async def reached() -> bool:
        return metric(await scrape(engine), name) == wanted

    await poll_until(reached, timeout_s)
