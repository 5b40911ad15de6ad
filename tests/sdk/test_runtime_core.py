"""Runtime, program model and call tagging against a capturing server on loopback."""

from __future__ import annotations

import json
import math
import time

import anyio
import anyio.lowlevel
import openai
import pytest

import agentrt
from agentrt import ConfigError, DeadlineExceeded, Runtime, RuntimeConfig
from agentrt.protocol import CallTags

from .fakeserver import FakeServer, FakeState, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

USER = [{"role": "user", "content": "hi"}]


def cfg(server: FakeServer, **kw: object) -> RuntimeConfig:
    kw.setdefault("controller", "off")
    return RuntimeConfig(base_url=server.base_url, model="m1", **kw)  # type: ignore[arg-type]


def tags_of(state: FakeState) -> list[CallTags]:
    out = []
    for req in state.requests:
        tags = CallTags.from_headers(req.headers)
        assert tags is not None
        out.append(tags)
    return out


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "not a url"},
        {"base_url": "ftp://x/v1"},
        {"base_url": "http://x/v1", "controller": "sometimes"},
        {"base_url": "http://x/v1", "request_timeout_s": 0},
        {"base_url": "http://x/v1", "event_timeout_s": math.inf},
        {"base_url": "http://x/v1", "max_retries": -1},
        {"base_url": "http://x/v1", "journal": object()},
        {"base_url": "http://x/v1", "session_id": "has spaces"},
        {"base_url": "http://x/v1", "fallback_base_url": "nope"},
        {"base_url": "http://x/v1", "model": ""},
    ],
)
def test_invalid_config_fails_at_construction(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        RuntimeConfig(**kwargs)  # type: ignore[arg-type]


def test_runtime_needs_a_config() -> None:
    with pytest.raises(ConfigError):
        Runtime({"base_url": "http://x/v1"})  # type: ignore[arg-type]


async def test_chat_calls_are_tagged_and_chained(server: FakeServer, state: FakeState) -> None:
    async with Runtime(cfg(server)) as rt, rt.program("two-step", timeout_s=20) as prog:
        first = await agentrt.chat(USER)
        assert first.choices[0].message.content == "ok"
        await agentrt.chat(USER, objective="throughput")
    t1, t2 = tags_of(state)
    assert (t1.program_id, t1.thread_id, t1.node_id, t1.parent_ids) == (
        prog.id,
        "main",
        "main:0",
        (),
    )
    assert (t2.node_id, t2.parent_ids, t2.objective) == ("main:1", ("main:0",), "throughput")
    assert t1.session_id == rt.session_id and t1.attempt == 1
    assert t1.timeout_ms is not None and 0 < t1.timeout_ms <= 20_000
    assert prog.status == "ok"
    assert [n.status for n in prog.nodes.values()] == ["ok", "ok"]
    assert prog.nodes["main:0"].input_tokens == 11


async def test_call_outside_a_program_gets_an_adhoc_program(
    server: FakeServer, state: FakeState
) -> None:
    async with Runtime(cfg(server)) as rt:
        await agentrt.chat(USER)
        await rt.openai_client().chat.completions.create(model="m1", messages=USER)  # type: ignore[arg-type]
    t1, t2 = tags_of(state)
    assert t1.program_id != t2.program_id
    assert t2.program_id.startswith("adhoc-") and t2.node_id == "main:0"
    assert t1.timeout_ms is None


async def test_raw_openai_client_is_tagged_inside_a_program(
    server: FakeServer, state: FakeState
) -> None:
    async with Runtime(cfg(server)) as rt:
        client = rt.openai_client()
        async with rt.program("raw") as prog:
            await client.chat.completions.create(model="m1", messages=USER)  # type: ignore[arg-type]
            await agentrt.chat(USER)
            stream = await client.chat.completions.create(
                model="m1",
                messages=USER,  # type: ignore[arg-type]
                stream=True,
            )
            assert isinstance(stream, openai.AsyncStream)
            async for _ in stream:
                pass
    t1, t2, t3 = tags_of(state)
    assert [t.node_id for t in (t1, t2, t3)] == ["main:0", "main:1", "main:2"]
    assert t3.parent_ids == ("main:1",)
    assert {t.program_id for t in (t1, t2, t3)} == {prog.id}
    assert [n.status for n in prog.nodes.values()] == ["ok", "ok", "ok"]
    assert prog.nodes["main:0"].output_tokens == 7  # usage sniffed from the raw JSON reply


async def test_parallel_threads_fork_and_join(server: FakeServer, state: FakeState) -> None:
    async with Runtime(cfg(server)) as rt, rt.program("fan") as prog:
        await agentrt.chat(USER)

        async def branch(i: int) -> int:
            await agentrt.chat(USER)
            await agentrt.chat(USER)
            return i

        async with agentrt.parallel(limit=2, objective="throughput") as par:
            branches = [par.start(branch, i) for i in range(3)]
        assert [b.value for b in branches] == [0, 1, 2]
        assert await agentrt.gather(lambda: branch(7)) == [7]
        await agentrt.chat(USER)
    by_node = {t.node_id: t for t in tags_of(state)}
    assert by_node["main.0:0"].parent_ids == ("main:0",)
    assert by_node["main.0:1"].parent_ids == ("main.0:0",)
    assert by_node["main.2:1"].objective == "throughput"
    assert by_node["main.3:0"].parent_ids == ("main.0:1", "main.1:1", "main.2:1")
    assert by_node["main:1"].parent_ids == ("main.3:1",)
    assert by_node["main:1"].objective == "latency"
    doc = json.loads(prog.to_json())
    assert {t["id"] for t in doc["threads"]} == {"main", "main.0", "main.1", "main.2", "main.3"}
    mermaid = prog.to_mermaid()
    assert mermaid.startswith("flowchart TD") and "main_0_1 --> main_3_0" in mermaid


async def test_same_program_id_gives_same_node_ids(server: FakeServer, state: FakeState) -> None:
    async def run(rt: Runtime) -> list[str]:
        async with rt.program("again", program_id="fixed-1") as prog:
            await agentrt.gather(lambda: agentrt.chat(USER), lambda: agentrt.chat(USER))
            await agentrt.chat(USER)
        return list(prog.nodes)

    async with Runtime(cfg(server)) as rt:
        first, second = await run(rt), await run(rt)
    assert first == second == ["main.0:0", "main.1:0", "main:0"]


async def test_deadline_cancels_and_the_server_sees_the_disconnect(
    server: FakeServer, state: FakeState
) -> None:
    state.delay_s = 5.0
    async with Runtime(cfg(server)) as rt:
        with pytest.raises(DeadlineExceeded):
            async with rt.program("slow", timeout_s=1.0) as prog:
                await agentrt.gather(lambda: agentrt.chat(USER), lambda: agentrt.chat(USER))
        assert prog.status == "deadline_exceeded"
        assert {n.status for n in prog.nodes.values()} == {"cancelled"}
        # Every call the server received is seen to disconnect. On a stalled machine a call
        # can find its deadline gone before it is sent (never sent, also "cancelled"), so the
        # count of received calls is at least one, not always two.
        await wait_until(
            lambda: (
                len(state.requests) >= 1
                and state.running == 0
                and state.disconnects == len(state.requests)
            )
        )
    assert state.running == 0 and state.completed == 0


async def test_a_call_too_late_for_the_deadline_is_cancelled_not_failed(
    server: FakeServer, state: FakeState
) -> None:
    """A call that finds no time left (its thread started after the deadline, e.g. on a
    stalled event loop) is never sent, and its node counts as cancelled like the others."""
    async with Runtime(cfg(server)) as rt:
        with pytest.raises(DeadlineExceeded):
            async with rt.program("late", timeout_s=0.05) as prog:
                time.sleep(0.1)  # noqa: ASYNC251 - blocks the loop past the deadline on purpose
                await agentrt.chat(USER)
    assert prog.status == "deadline_exceeded"
    assert prog.nodes["main:0"].status == "cancelled"
    assert state.requests == []


async def test_deadline_closes_raw_streams(server: FakeServer, state: FakeState) -> None:
    state.delay_s = 5.0
    state.reply = lambda body: {"role": "assistant", "content": " ".join(["w"] * 50)}
    async with Runtime(cfg(server)) as rt:
        client = rt.openai_client()
        with pytest.raises(DeadlineExceeded):
            # Long enough for a loaded machine to get the stream open before the deadline
            # (a call the deadline finds unsent is cancelled without reaching the server).
            async with rt.program("stream", timeout_s=2.0) as prog:
                stream = await client.chat.completions.create(
                    model="m1",
                    messages=USER,  # type: ignore[arg-type]
                    stream=True,
                )
                assert isinstance(stream, openai.AsyncStream)
                async for _ in stream:
                    pass
        await wait_until(lambda: state.disconnects >= 1)
    assert prog.nodes["main:0"].status == "cancelled"


async def test_cancelling_a_node_cancels_its_children(server: FakeServer, state: FakeState) -> None:
    state.delay_s = 5.0

    async def waiter() -> None:
        async with agentrt.wait("approval"):
            await agentrt.gather(lambda: agentrt.chat(USER))
        await agentrt.chat(USER)  # the program goes on after the cancelled wait

    async with (
        Runtime(cfg(server)) as rt,
        rt.program("cancel") as prog,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(waiter)
        await wait_until(lambda: state.running >= 1)
        state.delay_s = 0.0
        prog.cancel("main:0")
    assert prog.nodes["main:0"].status == "cancelled"
    assert prog.nodes["main.0:0"].status == "cancelled"
    assert prog.nodes["main:1"].status == "ok"
    await wait_until(lambda: state.disconnects >= 1)


@pytest.mark.timeout(120)
async def test_thousand_concurrent_programs_carry_their_own_ids(capture_server: str) -> None:
    """Must-show: 1,000 programs through one runtime, interleaved; every request carries its
    own program's ids, thread ids and parent ids (capturing server in its own process)."""
    n = 1000
    config = RuntimeConfig(
        base_url=capture_server + "/v1", model="m1", controller="off", max_connections=100
    )
    async with Runtime(config) as rt:

        async def program(i: int) -> None:
            async with rt.program(f"p{i}", program_id=f"prog-{i}"):
                await agentrt.chat([{"role": "user", "content": f"prog-{i} a"}])
                await anyio.lowlevel.checkpoint()
                await agentrt.gather(
                    lambda: agentrt.chat([{"role": "user", "content": f"prog-{i} b"}])
                )

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(program, i)
        async with rt.http_client() as http:
            captured = (await http.get(capture_server + "/captured")).json()
    assert len(captured) == 2 * n
    seen: dict[str, list[CallTags]] = {}
    order = []
    for record in captured:
        tags = CallTags.from_headers(record["headers"])
        assert tags is not None
        # The request's own content names the program it was made in.
        assert record["first"].split()[0] == tags.program_id
        seen.setdefault(tags.program_id, []).append(tags)
        order.append(tags.program_id)
    assert len(seen) == n
    positions: dict[str, list[int]] = {}
    for index, program_id in enumerate(order):
        positions.setdefault(program_id, []).append(index)
    interleaved = sum(1 for a, b in positions.values() if b - a > 1)
    assert interleaved > n // 2  # other programs' calls arrived between a program's two calls
    for calls in seen.values():
        by_node = {t.node_id: t for t in calls}
        assert by_node["main:0"].thread_id == "main" and by_node["main:0"].parent_ids == ()
        assert by_node["main.0:0"].thread_id == "main.0"
        assert by_node["main.0:0"].parent_ids == ("main:0",)


async def test_retries_are_the_same_node_with_the_next_attempt(
    server: FakeServer, state: FakeState
) -> None:
    async with Runtime(cfg(server, max_retries=1)) as rt:
        client = rt.openai_client(max_retries=1)
        async with rt.program("retry") as prog:
            state.fail_first = 1
            await agentrt.chat(USER)
            state.fail_first = 1
            await client.chat.completions.create(model="m1", messages=USER)  # type: ignore[arg-type]
    tags = tags_of(state)
    assert [(t.node_id, t.attempt) for t in tags] == [
        ("main:0", 1),
        ("main:0", 2),
        ("main:1", 1),
        ("main:1", 2),
    ]
    assert [(n.status, n.attempts) for n in prog.nodes.values()] == [("ok", 2), ("ok", 2)]
