"""A backend's ``api_key`` option is the controller's own credential for that server: a vLLM
started with ``--api-key`` answers 401 to anything without it, so the controller's health
probes, scrapes, model lists and kind probe must carry it as well as its forwarded calls."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from agentrt_controller.service import load_config, serve_controller

from .fake_vllm import FakeVllm, build_app
from .servers import serve_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SECRET = "backend-secret-7"


def _guarded(seen: list[tuple[str, str | None]]) -> Any:
    """A vLLM-like stub that answers 401 (vLLM's shape) without ``Bearer SECRET``."""
    app = build_app(FakeVllm(name="guarded"))

    async def guard(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization")
        seen.append((scope["path"], auth.decode() if auth else None))
        if auth != f"Bearer {SECRET}".encode():
            body = b'{"error": "Unauthorized"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return guard


async def _run(option: str, seen: list[tuple[str, str | None]]) -> tuple[int, dict[str, Any]]:
    async with serve_app(_guarded(seen)) as backend:
        spec = f"{backend},kind=vllm{option}"
        overrides = {"backends": [spec], "port": 0, "scrape_interval_s": 0.2}
        config = load_config(env={}, overrides=overrides)
        async with (
            serve_controller(config) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as http,
        ):
            for _ in range(50):  # the first health probe runs at start-up
                health = (await http.get("/health")).json()
                if health["status"] == "ok":
                    break
                await anyio.sleep(0.1)
            chat = await http.post(
                "/v1/chat/completions",
                json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
            )
            return chat.status_code, health


async def test_probes_and_calls_carry_the_backends_credential() -> None:
    seen: list[tuple[str, str | None]] = []
    status, health = await _run(f",api_key={SECRET}", seen)
    assert status == 200
    assert health["status"] == "ok"
    paths = {path for path, _ in seen}
    assert "/v1/chat/completions" in paths and len(paths) >= 2  # a probe besides the call
    assert all(auth == f"Bearer {SECRET}" for _, auth in seen), seen


async def test_without_the_credential_the_guarded_backend_stays_unhealthy() -> None:
    seen: list[tuple[str, str | None]] = []
    status, health = await _run("", seen)
    assert health["status"] != "ok"
    assert status >= 400
    assert all(auth is None for _, auth in seen)
