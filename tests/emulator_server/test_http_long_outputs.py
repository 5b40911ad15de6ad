"""Long outputs are planned off the event loop (a worker thread), with the same result.

The scripted model plans every output token ahead; on the event loop, four 20,000-token
``ignore_eos`` calls arriving together held the server ~0.3 s (0.8 s with a full
garbage collection in a test process): every stream and health probe waited, and a controller
probing every 0.2 s took the server out of routing (tests/ops/test_lifecycle_drain.py).
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest

from agentrt_emulator.server import prepare
from agentrt_emulator.server.prepare import RequestRules, prepare_in_thread
from agentrt_emulator.server.wire import ChatRequest, CompletionRequest

from .helpers import MODEL, running

pytestmark = pytest.mark.timeout(60)

RULES = RequestRules(MODEL, 32768, "fcfs", 32000)
HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("body", "headers", "threaded"),
    [
        ({"messages": HI}, {}, False),  # an answer of the median length
        ({"messages": HI, "max_tokens": 300, "ignore_eos": True}, {}, False),
        ({"messages": HI, "max_tokens": 20_000, "ignore_eos": True}, {}, True),
        ({"messages": HI, "max_completion_tokens": 5000, "ignore_eos": True}, {}, True),
        ({"messages": HI, "ignore_eos": True}, {}, True),  # the rest of the context
        ({"messages": HI, "agentrt_output_tokens": 5000}, {}, True),
        ({"messages": HI}, {"x-agentrt-output-tokens": "5000"}, True),
        ({"messages": HI, "agentrt_output_tokens": 5000, "max_tokens": 100}, {}, False),
        ({"messages": HI, "n": 100}, {}, True),  # 100 choices of the median length
        ({"messages": HI}, {"content-length": str(prepare.THREAD_BODY_BYTES)}, True),
        ({"prompt": "hi", "max_tokens": 5000, "ignore_eos": True}, {}, True),
        ({"prompt": "hi", "ignore_eos": True}, {}, False),  # 16 tokens by default
        ({"prompt": ["a"] * 100, "max_tokens": 50, "ignore_eos": True}, {}, True),
        ({"prompt": [1, 2, 3], "max_tokens": 50, "ignore_eos": True}, {}, False),
    ],
)
def test_which_requests_are_prepared_in_a_worker_thread(
    body: dict[str, Any], headers: dict[str, str], threaded: bool
) -> None:
    parsed = (ChatRequest if "messages" in body else CompletionRequest).model_validate(body)
    assert prepare_in_thread(parsed, headers, RULES) is threaded


@pytest.mark.anyio
async def test_a_long_output_is_planned_in_the_worker_thread_and_comes_out_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limiters: list[object] = []
    real = anyio.to_thread.run_sync

    async def recording(function: Any, *args: Any, limiter: Any = None, **kwargs: Any) -> Any:
        limiters.append(limiter)
        return await real(function, *args, limiter=limiter, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", recording)

    async def content(http: httpx.AsyncClient, url: str, tokens: int) -> str:
        body = {"model": MODEL, "messages": HI, "max_tokens": tokens, "ignore_eos": True}
        answer = await http.post(url + "/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == tokens
        return str(answer.json()["choices"][0]["message"]["content"])

    async with running() as engine, httpx.AsyncClient(timeout=30) as http:
        url, worker = engine.base_url, engine.state.prepare_limiter
        await content(http, url, 300)
        assert worker not in limiters
        threaded = await content(http, url, 6000)
        assert limiters.count(worker) == 1
        monkeypatch.setattr(prepare, "THREAD_OUTPUT_TOKENS", 10**9)
        on_the_loop = await content(http, url, 6000)
        assert limiters.count(worker) == 1
    assert threaded == on_the_loop
