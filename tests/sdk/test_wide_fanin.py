"""A fan-out of any width: a map-reduce over 10,000 items sends its reduce call (10,000
parents) with a bounded parent list on the wire — the first ``WIRE_PARENT_IDS`` ids, the count
and the digest of all (docs/protocol.md, "Wide fan-ins") — to an engine and through the
controller, and the SDK's own record keeps every parent."""

from __future__ import annotations

import httpx
import pytest

import agentrt
from agentrt import Runtime, RuntimeConfig, tool
from agentrt.fasthttp import FastHTTPTransport
from agentrt.program.model import Node
from agentrt.protocol import (
    HEADER_PARENT_COUNT,
    HEADER_PARENT_DIGEST,
    HEADER_PARENT_IDS,
    WIRE_PARENT_IDS,
    CallTags,
    parents_digest,
)
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ITEMS = 10_000


@tool
async def measure(text: str) -> int:
    """The length of a text."""
    return len(text)


async def _sum_of_lengths(parts: list[int]) -> str:
    reply = await agentrt.chat([{"role": "user", "content": f"sum {sum(parts)}"}], max_tokens=4)
    return reply.choices[0].message.content or ""


class _Recorder(httpx.AsyncBaseTransport):
    """Under the runtime's transport stack: keeps the headers of each chat request as sent."""

    def __init__(self) -> None:
        self.inner = FastHTTPTransport()
        self.sent: list[httpx.Headers] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            self.sent.append(request.headers)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _run_map_reduce(
    base_url: str, transport: httpx.AsyncBaseTransport | None = None
) -> tuple[agentrt.Program, str]:
    config = RuntimeConfig(
        base_url=base_url, model=DEFAULT_MODEL_NAME, controller="off", http_transport=transport
    )
    async with Runtime(config) as rt, rt.program("wide") as prog:
        items = [f"item {i}" for i in range(ITEMS)]
        answer = await agentrt.map_reduce(items, measure, _sum_of_lengths, limit=None)
    return prog, answer


def _reduce_node(prog: agentrt.Program) -> Node:
    (node,) = [n for n in prog.nodes.values() if n.kind == "llm"]
    return node


async def test_map_reduce_over_10000_items_against_the_engine() -> None:
    recorder = _Recorder()
    async with serve_engine(EmulatorConfig(time_scale=500.0)) as engine:
        prog, answer = await _run_map_reduce(engine.openai_base_url, recorder)
    await recorder.aclose()
    assert answer and prog.status == "ok"
    reduce = _reduce_node(prog)
    assert len(reduce.parent_ids) == ITEMS  # the SDK's record keeps every parent
    assert reduce.status == "ok"
    # On the wire: the first 64 parents, the count and the digest of all 10,000.
    (sent,) = recorder.sent
    assert sent[HEADER_PARENT_IDS].split(",") == list(reduce.parent_ids[:WIRE_PARENT_IDS])
    assert sent[HEADER_PARENT_COUNT] == str(ITEMS)
    assert sent[HEADER_PARENT_DIGEST] == parents_digest(reduce.parent_ids)


async def test_map_reduce_over_10000_items_through_the_controller() -> None:
    async with serve_engine(EmulatorConfig(time_scale=500.0)) as engine:
        config = ControllerConfig(port=0, backends=(BackendSpec(engine.base_url),))
        async with serve_controller(config) as url:
            prog, answer = await _run_map_reduce(url + "/v1")
            async with httpx.AsyncClient() as http:
                table = (await http.get(url + "/agentrt/v1/programs")).json()
    assert answer and prog.status == "ok"
    assert len(_reduce_node(prog).parent_ids) == ITEMS
    # The controller took the reduce call into its process table under the program's id.
    assert prog.id in str(table), table


def test_a_wide_fan_in_is_bounded_on_the_wire_and_named_in_full() -> None:
    parents = tuple(f"main.{i}:0" for i in range(ITEMS))
    tags = CallTags.for_node(
        session_id="s", program_id="p", thread_id="main", node_id="main:1", parent_ids=parents
    )
    headers = tags.to_headers()
    listed = headers[HEADER_PARENT_IDS].split(",")
    assert listed == list(parents[:WIRE_PARENT_IDS])
    assert headers[HEADER_PARENT_COUNT] == str(ITEMS)
    assert headers[HEADER_PARENT_DIGEST] == parents_digest(parents)
    assert sum(len(k) + len(v) for k, v in headers.items()) < 8 * 1024
    parsed = CallTags.from_headers({k.lower(): v for k, v in headers.items()})
    assert parsed == tags and parsed is not None and parsed.total_parents == ITEMS


def test_a_narrow_fan_in_lists_every_parent_and_nothing_more() -> None:
    parents = tuple(f"main.{i}:0" for i in range(WIRE_PARENT_IDS))
    tags = CallTags.for_node(
        session_id="s", program_id="p", thread_id="main", node_id="main:1", parent_ids=parents
    )
    headers = tags.to_headers()
    assert headers[HEADER_PARENT_IDS].split(",") == list(parents)
    assert HEADER_PARENT_COUNT not in headers and HEADER_PARENT_DIGEST not in headers
    assert tags.total_parents == WIRE_PARENT_IDS
