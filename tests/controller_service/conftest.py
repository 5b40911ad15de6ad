"""Fixtures for the controller service tests: fake OpenAI backends and a running controller."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from backends.servers import serve_app  # one uvicorn-on-a-free-port helper for all tests

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller

from .fake_openai import FakeState, build_fake


@contextlib.asynccontextmanager
async def fake_backends(*states: FakeState) -> AsyncIterator[list[str]]:
    """Serve one fake OpenAI server per state; yields their URLs."""
    async with contextlib.AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(serve_app(build_fake(s))) for s in states]
        yield urls


@contextlib.asynccontextmanager
async def controller(
    urls: Sequence[str], *, priority: bool = False, **options: Any
) -> AsyncIterator[tuple[str, ControllerApp]]:
    """A controller on a free port in front of ``urls``; yields ``(base_url, app)``."""
    apps: list[ControllerApp] = []
    options.setdefault("scrape_interval_s", 0.2)
    config = ControllerConfig(
        port=0,
        backends=tuple(BackendSpec(url, priority=priority) for url in urls),
        **options,
    )
    async with serve_controller(config, on_app=apps.append) as url:
        yield url, apps[0]


@pytest.fixture
def state() -> FakeState:
    return FakeState()


def chat_body(stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
        **extra,
    }


class Running:
    """A controller in front of fake servers, with an HTTP client."""

    def __init__(self, url: str, app: ControllerApp, http: httpx.AsyncClient) -> None:
        self.url = url
        self.app = app
        self.http = http

    async def chat(self, **kwargs: Any) -> httpx.Response:
        headers = kwargs.pop("headers", None)
        stream = kwargs.pop("stream", False)
        return await self.http.post(
            self.url + "/v1/chat/completions", json=chat_body(stream, **kwargs), headers=headers
        )


@contextlib.asynccontextmanager
async def running(*states: FakeState, **options: Any) -> AsyncIterator[Running]:
    """Fake servers for ``states``, a controller in front (``options`` go to its config)."""
    async with (
        fake_backends(*states) as urls,
        controller(urls, **options) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        yield Running(url, app, http)
