"""The SDK with the real intent journal (a SQLite file per test)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

import agentrt
from agentrt import ConfigError, IdempotencyKey, Runtime, RuntimeConfig, tool
from agentrt.errors import ProgramLeaseHeld
from agentrt.journal import Journal

from .fakeserver import FakeServer, FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def test_bad_journal_url_fails_at_construction() -> None:
    config = RuntimeConfig(base_url="http://127.0.0.1:9/v1", journal="mysql://nope/x")
    with pytest.raises(ConfigError):
        Runtime(config)


async def test_rerun_replays_llm_calls_and_never_repeats_the_effect(
    server: FakeServer, state: FakeState, tmp_path: Path
) -> None:
    target = tmp_path / "out.txt"
    keys: list[str] = []

    @tool(side_effect=True)
    async def append_line(text: str, key: IdempotencyKey) -> str:
        """Append a line to a file."""
        keys.append(key)
        with target.open("a") as handle:
            handle.write(text + "\n")
        return "appended"

    config = RuntimeConfig(
        base_url=server.base_url,
        model="m1",
        controller="off",
        journal=str(tmp_path / "journal.sqlite"),
    )
    for _ in range(2):
        async with Runtime(config) as rt, rt.program("writer", program_id="writer-1") as prog:
            reply = await agentrt.chat([{"role": "user", "content": "say something"}])
            assert await append_line(reply.choices[0].message.content or "") == "appended"
            assert rt.journal is not None
            assert await rt.journal.predict_tool_duration("append_line") is not None
    assert target.read_text() == "ok\n"
    assert len(keys) == 1 and keys[0]
    assert len(state.requests) == 1  # the second run replayed the LLM call
    assert [n.status for n in prog.nodes.values()] == ["replayed", "replayed"]


def test_lease_options_are_checked() -> None:
    for bad in ({"journal_lease_ttl_s": 0}, {"journal_lease_wait_s": -1.0}):
        with pytest.raises(ConfigError, match="journal_lease"):
            RuntimeConfig(base_url="http://127.0.0.1:9/v1", journal="j.sqlite", **bad)


async def test_lease_options_reach_the_journal_a_runtime_opens(
    server: FakeServer, tmp_path: Path
) -> None:
    url = str(tmp_path / "journal.sqlite")

    def config(wait_s: float) -> RuntimeConfig:
        return RuntimeConfig(
            base_url=server.base_url,
            model="m1",
            controller="off",
            journal=url,
            journal_lease_ttl_s=12.0,
            journal_lease_wait_s=wait_s,
        )

    started, release = anyio.Event(), anyio.Event()

    async def first_run(rt: Runtime) -> None:
        async with rt.program("p", program_id="leased-1"):
            started.set()
            await release.wait()

    async with Runtime(config(0.0)) as first, Runtime(config(30.0)) as second:
        journal = first.journal
        assert isinstance(journal, Journal)
        async with anyio.create_task_group() as group:
            group.start_soon(first_run, first)
            await started.wait()
            (lease,) = await journal.leases(["leased-1"])
            assert lease.ttl_s == 12.0
            async with Runtime(config(0.0)) as third:
                with pytest.raises(ProgramLeaseHeld):  # no wait configured: refused at once
                    async with third.program("p", program_id="leased-1"):
                        raise AssertionError("the lease is held")
            release.set()  # the waiting runtime gets the lease once the first run ends
            async with second.program("p", program_id="leased-1"):
                (lease,) = await journal.leases(["leased-1"])
        assert isinstance(second.journal, Journal)
        assert lease.epoch == 2 and lease.owner == second.journal.owner
