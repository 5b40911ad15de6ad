"""``/v1/embeddings``, ``/tokenize`` and ``/detokenize`` pass through the controller, routed to
a healthy backend of the request's model, with the controller's backend credential and the
tenant's authentication; program tags and session headers stay in the controller."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrt.protocol import CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.server import EmulatorConfig, serve_engine
from tests.backends.servers import serve_app

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@contextlib.asynccontextmanager
async def two_models() -> AsyncIterator[str]:
    """Two emulators serving different models, a controller in front; yields its URL."""
    async with (
        serve_engine(EmulatorConfig(model_name="model-a")) as first,
        serve_engine(EmulatorConfig(model_name="model-b")) as second,
    ):
        backends = tuple(BackendSpec(e.base_url, kind="emulator") for e in (first, second))
        config = ControllerConfig(port=0, backends=backends, scrape_interval_s=0.2)
        async with serve_controller(config) as url:
            yield url


async def test_embeddings_are_routed_by_model_and_deterministic() -> None:
    async with two_models() as url:
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        async with client:
            # The openai client asks for base64 by default and decodes it.
            first = await client.embeddings.create(model="model-b", input=["agent runtime", "x"])
            again = await client.embeddings.create(model="model-b", input="agent runtime")
            small = await client.embeddings.create(model="model-a", input="hi", dimensions=8)
            with pytest.raises(openai.NotFoundError):
                await client.embeddings.create(model="model-c", input="hi")
    assert first.model == "model-b" and small.model == "model-a"
    assert len(first.data) == 2 and len(first.data[0].embedding) == 256
    assert first.data[0].embedding == pytest.approx(again.data[0].embedding)
    assert sum(x * x for x in first.data[0].embedding) == pytest.approx(1.0, rel=1e-5)
    assert first.data[0].embedding != pytest.approx(first.data[1].embedding)
    assert len(small.data[0].embedding) == 8
    assert first.usage.prompt_tokens > 0


async def test_tokenize_and_detokenize_round_trip_through_the_controller() -> None:
    text = "Agents wait on tools, engines keep their context."
    async with two_models() as url, httpx.AsyncClient(timeout=10) as http:
        tokens = await http.post(url + "/tokenize", json={"model": "model-a", "prompt": text,
                                                          "add_special_tokens": False})  # fmt: skip
        ids = tokens.json()["tokens"]
        back = await http.post(url + "/detokenize", json={"model": "model-a", "tokens": ids})
        chat = await http.post(
            url + "/tokenize",
            json={"model": "model-b", "messages": [{"role": "user", "content": text}]},
        )
        wrong = await http.get(url + "/tokenize")
    assert tokens.status_code == 200 and tokens.json()["count"] == len(ids) > 5
    assert back.status_code == 200 and back.json() == {"prompt": text}
    assert chat.status_code == 200 and chat.json()["count"] > len(ids)  # the chat template
    assert wrong.status_code == 405


@contextlib.asynccontextmanager
async def recording_backend() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A backend that records each request's headers and body, and answers with them."""
    seen: list[dict[str, Any]] = []

    async def record(request: Request) -> Response:
        entry = {"path": request.url.path, "headers": dict(request.headers),
                 "body": await request.json()}  # fmt: skip
        seen.append(entry)
        return JSONResponse({"echo": entry["path"]}, status_code=201)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    app = Starlette(
        routes=[
            *[Route(p, record, methods=["POST"]) for p in ("/v1/embeddings", "/tokenize")],
            Route("/v1/models", models),
        ]
    )
    async with serve_app(app) as url:
        yield url, seen


async def test_tenant_keys_backend_credential_and_what_stays_in_the_controller() -> None:
    tags = CallTags(session_id="s", program_id="p", thread_id="main", node_id="n").to_headers()
    client_headers = {
        "authorization": "Bearer key-alice-0001",
        "x-request-id": "req-7",
        "x-session-id": "sess-1",
        **tags,
    }
    body = {"model": "m", "input": "hi", "vllm_xargs": {"agentic_context": {"program_id": "p"}}}
    async with recording_backend() as (backend_url, seen):
        spec = BackendSpec(backend_url, kind="openai", options={"api_key": "backend-secret"})
        config = ControllerConfig(
            port=0, backends=(spec,), api_keys="alice=key-alice-0001", scrape_interval_s=0.2
        )
        async with serve_controller(config) as url, httpx.AsyncClient(timeout=10) as http:
            anonymous = await http.post(url + "/tokenize", json={"prompt": "hi"})
            embedded = await http.post(url + "/v1/embeddings", json=body, headers=client_headers)
            tokenized = await http.post(
                url + "/tokenize", json={"prompt": "hi"}, headers=client_headers
            )
    assert anonymous.status_code == 401
    assert embedded.status_code == 201 and embedded.json() == {"echo": "/v1/embeddings"}
    assert tokenized.status_code == 201 and tokenized.json() == {"echo": "/tokenize"}
    assert [s["path"] for s in seen] == ["/v1/embeddings", "/tokenize"]
    for entry in seen:
        headers = entry["headers"]
        assert headers["authorization"] == "Bearer backend-secret"  # never the tenant's key
        assert headers["x-request-id"] == "req-7"
        assert not [h for h in headers if h.startswith("x-agentrt-") or h == "x-session-id"]
    assert seen[0]["body"] == {"model": "m", "input": "hi"}  # agentic_context stripped
