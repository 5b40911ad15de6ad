"""The layers of the runtime's transport stack, each alone on an ``httpx.MockTransport``."""

from __future__ import annotations

import json
import math

import anyio
import httpx
import pytest
from opentelemetry.trace import INVALID_SPAN

from agentrt import DeadlineExceeded
from agentrt.program.model import ProgramGraph
from agentrt.runtime.transports.deadline import TIMEOUT_SLACK_S, DeadlineTransport
from agentrt.runtime.transports.fallback import FallbackTransport
from agentrt.runtime.transports.sharding import ShardedTransport
from agentrt.runtime.transports.tagging import TaggingTransport
from agentrt.runtime.transports.target import EXTENSION, CallTarget

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

URL = "http://primary.test/v1/chat/completions"


def llm_request(deadline_s: float = math.inf, program_id: str = "p-1") -> httpx.Request:
    graph = ProgramGraph(program_id, "t", "s-1", deadline_s, 0.0)
    node = graph.add_node("main", "llm", "m1", ("main:9",), objective="throughput")
    node.attempts = 2
    request = httpx.Request("POST", URL, json={"model": "m1"})
    request.extensions[EXTENSION] = CallTarget(node, graph, INVALID_SPAN)
    return request


def recorder(sent: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={})

    return httpx.MockTransport(handle)


async def test_deadline_layer_refuses_a_call_with_no_time_left() -> None:
    sent: list[httpx.Request] = []
    with pytest.raises(DeadlineExceeded, match="has no time left for main:0"):
        await DeadlineTransport(recorder(sent)).handle_async_request(
            llm_request(deadline_s=anyio.current_time() - 1)
        )
    assert sent == []


async def test_deadline_layer_caps_the_timeouts_and_hands_down_the_budget() -> None:
    sent: list[httpx.Request] = []
    request = llm_request(deadline_s=anyio.current_time() + 2.0)
    request.extensions["timeout"] = {"connect": 1.0, "read": 600.0, "write": None, "pool": None}
    await DeadlineTransport(recorder(sent)).handle_async_request(request)
    timeouts = sent[0].extensions["timeout"]
    assert timeouts["connect"] == 1.0
    assert 1.9 < timeouts["read"] <= 2.0 + TIMEOUT_SLACK_S
    assert timeouts["write"] == timeouts["pool"] == timeouts["read"]
    target = request.extensions[EXTENSION]
    assert 1900 <= target.timeout_ms <= 2000


async def test_tagging_layer_writes_the_call_tags() -> None:
    sent: list[httpx.Request] = []
    tagging = TaggingTransport(recorder(sent), "s-1")
    request = llm_request()
    request.extensions[EXTENSION].timeout_ms = 1500
    await tagging.handle_async_request(request)
    await tagging.handle_async_request(httpx.Request("GET", "http://primary.test/v1/models"))
    tagged, other = sent[0].headers, sent[1].headers
    assert tagged["x-agentrt-session-id"] == "s-1"
    assert tagged["x-agentrt-program-id"] == "p-1"
    assert tagged["x-agentrt-node-id"] == "main:0"
    assert tagged["x-agentrt-parent-ids"] == "main:9"
    assert tagged["x-agentrt-attempt"] == "2"
    assert tagged["x-agentrt-objective"] == "throughput"
    assert tagged["x-agentrt-timeout-ms"] == "1500"
    assert other["x-agentrt-session-id"] == "s-1"
    assert "x-agentrt-program-id" not in other


async def test_fallback_layer_holds_the_fallback_after_a_connection_failure() -> None:
    sent: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(f"{request.url} {request.headers['authorization']}")
        if request.url.host == "primary.test":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json={})

    fallback = FallbackTransport(
        httpx.MockTransport(handle),
        base_url="http://primary.test/v1",
        fallback_base_url="http://fallback.test/v1/",
        fallback_api_key="k2",
        hold_s=30.0,
    )
    for _ in range(2):
        request = httpx.Request("POST", URL, headers={"authorization": "Bearer k1"})
        await fallback.handle_async_request(request)
    assert sent == [
        f"{URL} Bearer k1",
        "http://fallback.test/v1/chat/completions Bearer k2",
        "http://fallback.test/v1/chat/completions Bearer k2",  # held: the primary is not tried
    ]


async def test_sharding_layer_keeps_a_program_on_one_pool_and_frees_slots() -> None:
    by_pool: list[list[httpx.Request]] = [[], [], []]
    sharded = ShardedTransport([recorder(sent) for sent in by_pool], shard_limit=1)
    for _ in range(3):  # a limit of 1: each reply (read already) frees its slot at once
        await sharded.handle_async_request(llm_request(program_id="p-7"))
    assert sorted(len(sent) for sent in by_pool) == [0, 0, 3]


async def test_peer_hints_add_vllm_routers_agentic_context_only_when_enabled() -> None:
    sent: list[httpx.Request] = []
    hinted = TaggingTransport(recorder(sent), "s-1", peer_hints=("vllm-router",))
    plain = TaggingTransport(recorder(sent), "s-1")
    request = llm_request()
    request.extensions[EXTENSION].timeout_ms = 1500
    await hinted.handle_async_request(request)
    await plain.handle_async_request(llm_request())
    await hinted.handle_async_request(httpx.Request("POST", URL, json={"model": "m1"}))
    with_hint, without, not_a_call = (json.loads(r.content) for r in sent)
    context = json.loads(with_hint["vllm_xargs"]["agentic_context"])
    assert context == {
        "session_id": "s-1",
        "program_id": "p-1",
        "agent_id": "main",
        "step_id": 0,
        "request_deadline_seconds": 1.5,
    }
    assert with_hint["model"] == "m1"
    assert int(sent[0].headers["content-length"]) == len(sent[0].content)
    assert sent[0].headers["x-agentrt-program-id"] == "p-1"  # the headers stay
    assert without == not_a_call == {"model": "m1"}


async def test_peer_hints_keep_a_callers_own_agentic_context_and_other_xargs() -> None:
    sent: list[httpx.Request] = []
    hinted = TaggingTransport(recorder(sent), "s-1", peer_hints=("vllm-router",))
    own = {"model": "m1", "vllm_xargs": {"agentic_context": {"program_id": "theirs"}}}
    other = {"model": "m1", "vllm_xargs": {"top_n": 3}}
    for body in (own, other):
        request = httpx.Request("POST", URL, json=body)
        request.extensions[EXTENSION] = llm_request().extensions[EXTENSION]
        await hinted.handle_async_request(request)
    kept, merged = (json.loads(r.content) for r in sent)
    assert kept == own
    assert merged["vllm_xargs"]["top_n"] == 3
    assert json.loads(merged["vllm_xargs"]["agentic_context"])["program_id"] == "p-1"


def test_peer_hints_name_known_routers_only() -> None:
    from agentrt import ConfigError, RuntimeConfig

    assert RuntimeConfig(base_url="http://h/v1", peer_hints=("vllm-router",)).peer_hints
    with pytest.raises(ConfigError, match="peer_hints must be a tuple of vllm-router"):
        RuntimeConfig(base_url="http://h/v1", peer_hints=("nginx",))
