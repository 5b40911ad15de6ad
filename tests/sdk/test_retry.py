"""The retry layer (agentrt.runtime.transports.retry) alone on an ``httpx.MockTransport``: it
resends what the server never took, within its budget and the program's deadline, and nothing
else."""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Callable

import anyio
import httpx
import pytest
from opentelemetry.trace import INVALID_SPAN

from agentrt import ConfigError, RuntimeConfig
from agentrt.program.model import ProgramGraph
from agentrt.runtime.transports.retry import RetryTransport, retry_after_s
from agentrt.runtime.transports.target import EXTENSION, CallTarget

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

URL = "http://controller.test/v1/chat/completions"
Answer = Callable[[httpx.Request], httpx.Response]


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def draining(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, headers={"retry-after": "0"}, json={"error": {}})


def ok(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json={})


def scripted(answers: list[Answer], sent: list[httpx.Request]) -> httpx.MockTransport:
    """Answers each request with the next of ``answers`` (the last one repeats)."""

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[min(len(sent), len(answers)) - 1](request)

    return httpx.MockTransport(handle)


def llm_request(graph: ProgramGraph | None = None) -> httpx.Request:
    graph = graph or ProgramGraph("p-1", "t", "s-1", math.inf, 0.0)
    node = graph.nodes.get("main:0") or graph.add_node("main", "llm", "m1", ())
    request = httpx.Request("POST", URL, json={"model": "m1"})
    request.extensions[EXTENSION] = CallTarget(node, graph, INVALID_SPAN)
    return request


def layer(answers: list[Answer], sent: list[httpx.Request], budget_s: float) -> RetryTransport:
    return RetryTransport(scripted(answers, sent), budget_s, random.Random(7))


async def test_a_refused_connection_and_a_draining_503_are_sent_again() -> None:
    sent: list[httpx.Request] = []
    retry = layer([refused, refused, draining, ok], sent, budget_s=10)
    response = await retry.handle_async_request(llm_request())
    assert response.status_code == 200
    assert len(sent) == 4 and retry.resent == 3
    assert {r.content for r in sent} == {b'{"model":"m1"}'}  # the same body every time


@pytest.mark.parametrize(
    "answer",
    [
        lambda r: httpx.Response(503, json={}),  # no Retry-After: work may have begun
        lambda r: httpx.Response(500, json={}),
        lambda r: httpx.Response(429, headers={"retry-after": "0"}, json={}),
        lambda r: httpx.Response(400, json={}),
    ],
    ids=["503-without-retry-after", "500", "429", "400"],
)
async def test_other_answers_are_returned_as_they_are(answer: Answer) -> None:
    sent: list[httpx.Request] = []
    retry = layer([answer, ok], sent, budget_s=10)
    first = await retry.handle_async_request(llm_request())
    assert first.status_code != 200 and len(sent) == 1 and retry.resent == 0


async def test_a_cut_request_is_not_sent_again() -> None:
    def cut(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("server disconnected", request=request)

    sent: list[httpx.Request] = []
    with pytest.raises(httpx.RemoteProtocolError):
        await layer([cut, ok], sent, budget_s=10).handle_async_request(llm_request())
    assert len(sent) == 1


async def test_past_the_budget_the_last_failure_is_returned() -> None:
    sent: list[httpx.Request] = []
    retry = layer([refused], sent, budget_s=0.3)
    with pytest.raises(httpx.ConnectError):
        await retry.handle_async_request(llm_request())
    assert retry.resent >= 1 and len(sent) == retry.resent + 1
    sent.clear()
    # A Retry-After longer than the budget left: the 503 at once, nobody waits for nothing.
    late = layer([lambda r: httpx.Response(503, headers={"retry-after": "60"})], sent, 5)
    assert (await late.handle_async_request(llm_request())).status_code == 503
    assert len(sent) == 1


async def test_the_openai_clients_retries_of_a_call_share_its_window() -> None:
    sent: list[httpx.Request] = []
    retry = layer([refused], sent, budget_s=0.3)
    graph = ProgramGraph("p-1", "t", "s-1", math.inf, 0.0)
    with pytest.raises(httpx.ConnectError):
        await retry.handle_async_request(llm_request(graph))
    first_round = len(sent)
    await anyio.sleep(0.3)  # the window (0.3 s from the first refusal) has ended by now
    with pytest.raises(httpx.ConnectError):  # the same node again: no new window
        await retry.handle_async_request(llm_request(graph))
    assert len(sent) == first_round + 1


async def test_no_wait_goes_past_the_programs_deadline() -> None:
    sent: list[httpx.Request] = []
    deadline_s = anyio.current_time() + 0.3
    graph = ProgramGraph("p-1", "t", "s-1", deadline_s, 0.0)
    with pytest.raises(httpx.ConnectError):
        await layer([refused], sent, budget_s=10).handle_async_request(llm_request(graph))
    assert anyio.current_time() < deadline_s


async def test_a_streamed_body_is_not_sent_again() -> None:
    async def body() -> object:
        yield b"{}"

    sent: list[httpx.Request] = []
    request = httpx.Request("POST", URL, content=body())
    with pytest.raises(httpx.ConnectError):
        await layer([refused, ok], sent, budget_s=10).handle_async_request(request)
    assert len(sent) == 1


async def test_a_zero_budget_sends_once() -> None:
    sent: list[httpx.Request] = []
    with pytest.raises(httpx.ConnectError):
        await layer([refused, ok], sent, budget_s=0).handle_async_request(llm_request())
    assert len(sent) == 1


def test_retry_after_values() -> None:
    assert retry_after_s("2") == 2.0
    assert retry_after_s(" 0 ") == 0.0
    assert retry_after_s("-5") == 0.0
    assert retry_after_s(None) is None
    assert retry_after_s("soon") is None
    assert retry_after_s("inf") is None
    in_a_minute = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 < (retry_after_s(in_a_minute) or 0) <= 60
    assert retry_after_s(email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0


def test_the_budget_is_validated() -> None:
    with pytest.raises(ConfigError, match="retry_budget_s must be a finite number"):
        RuntimeConfig(base_url="http://x.test/v1", retry_budget_s=-1)
    assert RuntimeConfig(base_url="http://x.test/v1").retry_budget_s == 10.0
