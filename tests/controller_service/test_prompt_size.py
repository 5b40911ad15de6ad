"""The prompt size estimate is corrected by the backends' usage (service/http/prompt_size.py):
the memory rule counts a call's context in the engine's tokens, not in its body's bytes / 4.

Over real HTTP: a controller in front of an emulator, one tagged program of filler words
(about five characters per token in the emulator's tokenizer, so bytes / 4 overstates the
prompt by a quarter). The first call's context is counted uncorrected; from the second on, the
ledger holds what the engine holds — the prefix two programs share included, which it counts
from the prompts' text chains at the same factor.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from agentrt.errors import ConfigError
from agentrt.protocol import CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.routing.hashing import DEFAULT_BLOCK_TOKENS
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_controller.service.http.incoming import parse_call
from agentrt_controller.service.http.prompt_size import PromptSizer, prompt_units
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from agentrt_sim.replay.prompts import filler

pytestmark = pytest.mark.timeout(60)


def test_the_factor_is_one_until_a_report_then_the_ratio_of_the_means() -> None:
    sizer = PromptSizer(weight=0.5)
    assert sizer.factor("m") == 1.0
    sizer.observe("m", 1000, 800)
    assert sizer.factor("m") == pytest.approx(0.8)
    sizer.observe("m", 3000, 2400)  # means: tokens 1600, units 2000
    assert sizer.factor("m") == pytest.approx(0.8)
    sizer.observe("m", 10, 100)  # a small prompt moves the means little
    assert sizer.factor("m") == pytest.approx(850 / 1005)
    assert sizer.factor("other") == 1.0  # per model


def test_odd_reports_are_ignored_or_bounded() -> None:
    sizer = PromptSizer()
    sizer.observe("m", 0, 100)
    sizer.observe("m", 100, 0)
    sizer.observe("m", -5, 100)
    assert sizer.factor("m") == 1.0
    sizer.observe("m", 1_000_000, 10)  # an image's base64: few tokens for many bytes
    assert sizer.factor("m") == 0.1
    sizer.observe("n", 1, 10_000)
    assert sizer.factor("n") == 10.0
    with pytest.raises(ConfigError, match="weight"):
        PromptSizer(weight=0)


def test_parse_call_applies_the_models_factor_and_keeps_the_uncorrected_units() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello " * 400}]}
    raw = json.dumps(body).encode()
    bare = parse_call(raw, {}, "c1", 0.0, None)
    assert bare.call.prompt_tokens == bare.prompt_units == prompt_units(len(raw))
    sizer = PromptSizer()
    sizer.observe("m", 1000, 500)
    corrected = parse_call(raw, {}, "c2", 0.0, None, prompt_size=sizer)
    assert corrected.prompt_units == bare.prompt_units
    assert corrected.call.prompt_tokens == bare.prompt_units // 2
    assert bare.call.block_tokens == DEFAULT_BLOCK_TOKENS  # a text chain element: 16 units
    assert corrected.call.block_tokens == DEFAULT_BLOCK_TOKENS / 2  # the same factor
    other = parse_call(raw.replace(b'"m"', b'"x"'), {}, "c3", 0.0, None, prompt_size=sizer)
    assert other.call.prompt_tokens == other.prompt_units  # no report for that model yet


def _demand(app: ControllerApp) -> int:
    """The tokens the memory rule reserves on the one backend now."""
    memory = app.core.dispatcher.memory
    assert memory is not None
    (backend_id,) = app.core.pool.states
    return memory.demand_tokens(backend_id, app.core.clock())


def _usage(sse: str) -> dict[str, int]:
    """The usage of a streamed answer (its last chunk with one)."""
    chunks = [json.loads(line[6:]) for line in sse.splitlines() if line.startswith("data: {")]
    usage: dict[str, int] = [c["usage"] for c in chunks if c.get("usage")][-1]
    return usage


@asynccontextmanager
async def _stack() -> AsyncIterator[tuple[str, httpx.AsyncClient, ControllerApp]]:
    """A controller in front of one emulator (its URL, a client, the app)."""
    async with serve_engine(EmulatorConfig()) as engine:
        config = ControllerConfig(port=0, backends=(BackendSpec(engine.base_url, kind="emulator"),))
        apps: list[ControllerApp] = []
        async with (
            serve_controller(config, on_app=apps.append) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            yield url, http, apps[0]


async def _call(
    url: str,
    http: httpx.AsyncClient,
    messages: list[str],
    program: str | None = None,
    *,
    node: str = "n0",
    stream: bool = False,
) -> dict[str, int]:
    """One call of user ``messages`` (2 output tokens) of ``program`` (``None``: untagged);
    its usage."""
    body: dict[str, Any] = {
        "model": DEFAULT_MODEL_NAME,
        "messages": [{"role": "user", "content": text} for text in messages],
        "max_tokens": 2,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    headers = {}
    if program is not None:
        tags = CallTags(session_id="s1", program_id=program, thread_id="main", node_id=node)
        headers = tags.to_headers()
    answer = await http.post(url + "/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    usage: dict[str, int] = _usage(answer.text) if stream else answer.json()["usage"]
    return usage


@pytest.mark.anyio
async def test_the_memory_ledger_counts_engine_tokens_once_a_call_reported() -> None:
    contexts = []
    async with _stack() as (url, http, app):
        # The first call streamed (the factor is learned from the stream's usage chunk), the
        # second a whole answer.
        for node, words, stream in (("c0", 10_000, True), ("c1", 20_000, False)):
            usage = await _call(url, http, [filler(words, node)], "p1", node=node, stream=stream)
            engine_context = usage["prompt_tokens"] + usage["completion_tokens"]
            contexts.append((_demand(app), engine_context))
    (first, first_engine), (second, second_engine) = contexts
    assert first > 1.15 * first_engine  # bytes / 4 of short words: no report yet
    assert second == pytest.approx(second_engine, rel=0.03)


@pytest.mark.anyio
async def test_a_prefix_two_programs_share_is_counted_once_in_engine_tokens() -> None:
    """Two programs on one backend whose prompts start with the same long message: the ledger
    holds the second's context and no more (the shared message once), in the engine's tokens.
    Counting the text chain's elements as 16 tokens each (64 characters: ~13 of these tokens)
    would take a quarter of the shared message too much off."""
    shared = filler(20_000, "repository")
    async with _stack() as (url, http, app):
        await _call(url, http, [filler(20_000, "warm-up")])  # untagged: teaches the factor
        before = _demand(app)
        first = await _call(url, http, [shared], "a")
        second = await _call(url, http, [shared, filler(4_000, "task")], "b")
        demand = _demand(app) - before
    assert first["prompt_tokens"] > 8192  # both count in the ledger (min_context_tokens)
    # a's context is all in b's: what both hold is b's context (prompt + 2 output tokens)
    held = second["prompt_tokens"] + second["completion_tokens"]
    assert demand == pytest.approx(held, rel=0.04)
