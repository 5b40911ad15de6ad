"""@tool schemas and validation, tool execution, side effects through the journal, ReAct."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel, Field

import agentrt
from agentrt import (
    ConfigError,
    IdempotencyKey,
    JournalError,
    Runtime,
    RuntimeConfig,
    ToolArgumentsInvalid,
    ToolError,
    UnknownOutcome,
    tool,
)
from agentrt.journal.api import ReconcileResult

from .fakejournal import MemoryJournal
from .fakeserver import FakeServer, FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class Point(BaseModel):
    x: float
    y: float


@tool
async def add(a: int, b: Annotated[int, Field(description="second addend")] = 2) -> int:
    """Add two integers.

    Args:
        a: first addend
    """
    return a + b


@tool(timeout_s=0.05)
async def slow() -> str:
    """Takes too long."""
    await anyio.sleep(5)
    return "never"


@tool
async def norm(p: Point) -> float:
    """Length of a point's vector."""
    return float((p.x**2 + p.y**2) ** 0.5)


written: list[tuple[str, str]] = []


@tool(side_effect=True)
async def write(text: str, key: IdempotencyKey) -> str:
    """Write text somewhere (a side effect)."""
    written.append((key, text))
    return f"wrote {len(text)} chars"


def cfg(server: FakeServer, **kw: Any) -> RuntimeConfig:
    kw.setdefault("controller", "off")
    return RuntimeConfig(base_url=server.base_url, model="m1", **kw)


def tool_call(name: str, arguments: str, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_schema_from_hints_and_docstring() -> None:
    schema = add.openai_schema()
    fn = schema["function"]
    assert fn["name"] == "add" and fn["description"] == "Add two integers."
    props = fn["parameters"]["properties"]
    assert props["a"] == {"type": "integer", "description": "first addend", "title": "A"}
    assert props["b"]["description"] == "second addend" and props["b"]["default"] == 2
    assert fn["parameters"]["required"] == ["a"]
    assert fn["parameters"]["additionalProperties"] is False
    assert "key" not in write.parameters["properties"]  # injected, not the model's business
    assert "$defs" in norm.parameters


def test_bad_tool_definitions_fail_at_decoration() -> None:
    def sync(x: int) -> int:
        return x

    with pytest.raises(ConfigError):
        tool(sync)  # type: ignore[arg-type]

    async def star(*xs: int) -> int:
        return 0

    with pytest.raises(ConfigError):
        tool(star)
    with pytest.raises(ConfigError):
        tool(name="bad name!")(add.fn)


@pytest.mark.parametrize("arguments", ['{"a": "x"}', '{"a": 1', "", '{"a": 1, "zz": 3}', "[1]"])
def test_invalid_arguments_raise_a_message_for_the_model(arguments: str) -> None:
    with pytest.raises(ToolArgumentsInvalid, match="invalid arguments for tool add"):
        add.parse(arguments)


async def test_direct_tool_calls_are_nodes(server: FakeServer, state: FakeState) -> None:
    async with Runtime(cfg(server)) as rt, rt.program("tools") as prog:
        assert await add(1, b=5) == 6
        assert await norm(Point(x=3, y=4)) == 5.0
        with pytest.raises(agentrt.ToolTimeout):
            await slow()
    kinds = [(n.kind, n.name, n.status) for n in prog.nodes.values()]
    assert kinds == [("tool", "add", "ok"), ("tool", "norm", "ok"), ("tool", "slow", "error")]
    assert prog.nodes["main:1"].parent_ids == ("main:0",)
    assert rt.tool_history.predict("add") is not None


async def test_parallel_tool_calls_run_concurrently_in_threads(
    server: FakeServer, state: FakeState
) -> None:
    started = 0
    both = anyio.Event()

    @tool
    async def rendezvous(i: int) -> int:
        nonlocal started
        started += 1
        if started == 2:
            both.set()
        with anyio.fail_after(2):  # deadlocks unless the calls really run concurrently
            await both.wait()
        return i

    async with Runtime(cfg(server)) as rt, rt.program("par") as prog:
        results = await agentrt.execute_tool_calls(
            [
                tool_call("rendezvous", '{"i": 1}', "a"),
                tool_call("rendezvous", '{"i": 2}', "b"),
                tool_call("nope", "{}", "c"),
                tool_call("rendezvous", '{"i": "x"}', "d"),
            ],
            [rendezvous],
        )
    assert [r.value for r in results[:2]] == [1, 2]
    assert (
        isinstance(results[2].error, ToolArgumentsInvalid) and "unknown tool" in results[2].content
    )
    assert results[3].content.startswith("Error: invalid arguments for tool rendezvous")
    assert [m["tool_call_id"] for m in (r.message() for r in results)] == ["a", "b", "c", "d"]
    assert {prog.nodes[r.node_id].thread_id for r in results[:2]} == {"main.0", "main.1"}


async def test_side_effect_tool_needs_a_journal(server: FakeServer, state: FakeState) -> None:
    async with Runtime(cfg(server)) as rt, rt.program("no journal"):
        with pytest.raises(JournalError, match="no journal is configured"):
            await write("x")


async def test_side_effect_runs_once_through_the_journal(
    server: FakeServer, state: FakeState
) -> None:
    written.clear()
    journal = MemoryJournal()
    async with Runtime(cfg(server, journal=journal)) as rt:
        for _ in range(2):  # the re-run with the same program id replays
            async with rt.program("effects", program_id="eff-1") as prog:
                await agentrt.chat([{"role": "user", "content": "go"}])
                assert await write("hello") == "wrote 5 chars"
    assert len(written) == 1 and written[0][0] == journal.keys[1]
    tool_steps = [s for s in journal.specs if s.kind == "tool"]
    assert [(s.thread_id, s.seq, s.side_effect) for s in tool_steps] == [("main", 1, True)] * 2
    assert len(state.requests) == 1  # the LLM call was replayed too
    assert [n.status for n in prog.nodes.values()] == ["replayed", "replayed"]
    assert journal.durations["write"]


async def test_unknown_outcome_surfaces_or_reconciles(server: FakeServer, state: FakeState) -> None:
    journal = MemoryJournal(crash_after_execute=True)
    checked: list[str] = []

    async def found(key: str) -> ReconcileResult:
        checked.append(key)
        return ReconcileResult("done", "found at provider")

    @tool(side_effect=True)
    async def pay(amount: int) -> str:
        """Pay."""
        return "paid"

    @tool(name="pay", side_effect=True, reconcile=found)
    async def pay_reconciled(amount: int) -> str:
        """Pay."""
        return "paid again"

    async with Runtime(cfg(server, journal=journal)) as rt:
        with pytest.raises(RuntimeError, match="simulated crash"):
            async with rt.program("pay", program_id="pay-1"):
                await pay(5)
        journal.crash_after_execute = False
        with pytest.raises(UnknownOutcome):
            async with rt.program("pay", program_id="pay-1"):
                await pay(5)
        async with rt.program("pay", program_id="pay-1"):
            assert await pay_reconciled(5) == "found at provider"
    assert len(checked) == 1


async def test_react_loop_with_tools_and_bad_json(server: FakeServer, state: FakeState) -> None:
    turns: Iterator[dict[str, Any]] = iter(
        [
            {"role": "assistant", "content": None, "tool_calls": [tool_call("add", '{"a": 2')]},
            {"role": "assistant", "content": None, "tool_calls": [tool_call("add", '{"a": 2}')]},
            {"role": "assistant", "content": "The answer is 4."},
        ]
    )
    state.reply = lambda body: next(turns)
    async with Runtime(cfg(server)):
        result = await agentrt.react("what is 2+2?", [add], system="be brief")
    assert result.answer == "The answer is 4." and result.steps == 3
    assert result.stop_reason == "answer"
    assert result.tool_results[0].error is not None and result.tool_results[1].value == 4
    second = state.requests[1].body
    assert second["tools"][0]["function"]["name"] == "add"
    tool_msg = second["messages"][-1]
    assert tool_msg["role"] == "tool" and tool_msg["content"].startswith("Error: invalid arguments")
    assert json.loads(state.requests[2].body["messages"][-1]["content"]) == 4


async def test_react_gives_up_after_repeated_invalid_calls(
    server: FakeServer, state: FakeState
) -> None:
    state.reply = lambda body: {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call("add", "not json")],
    }
    async with Runtime(cfg(server)):
        with pytest.raises(ToolArgumentsInvalid, match="3 turns in a row"):
            await agentrt.react("x", [add], max_invalid_tool_calls=2)
        state.reply = lambda body: {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("add", '{"a": 1}')],
        }
        result = await agentrt.react("x", [add], max_steps=2)
    assert result.stop_reason == "max_steps" and result.answer is None


async def test_tool_error_goes_back_to_the_model(server: FakeServer, state: FakeState) -> None:
    @tool
    async def fragile() -> str:
        """Fails."""
        raise ToolError("disk full")

    async with Runtime(cfg(server)) as rt, rt.program("x"):
        (result,) = await agentrt.execute_tool_calls([tool_call("fragile", "{}")], [fragile])
    assert result.content == "Error: disk full"


# ----------------------------------------------------------------- a tool that raises


def _failing_turns(name: str) -> Iterator[dict[str, Any]]:
    """The model calls ``name`` once, then answers."""
    return iter(
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call(name, '{"city": "Oslo"}')],
            },
            {"role": "assistant", "content": "The service is down; try later."},
        ]
    )


def _weather(**options: Any) -> agentrt.Tool[str]:
    @tool(name="weather", **options)
    async def weather(city: str) -> str:
        """Today's weather in a city."""
        raise ConnectionError(f"weather service unreachable for {city}")

    return weather


async def test_an_exception_from_a_read_only_tool_goes_back_to_the_model(
    server: FakeServer, state: FakeState
) -> None:
    turns = _failing_turns("weather")
    state.reply = lambda body: next(turns)
    async with Runtime(cfg(server)) as rt, rt.program("weather") as prog:
        result = await agentrt.react("Weather in Oslo?", [_weather()])
    assert result.stop_reason == "answer" and result.answer == "The service is down; try later."
    (failed,) = result.tool_results
    assert isinstance(failed.error, agentrt.ToolFailed)
    assert isinstance(failed.error.__cause__, ConnectionError)
    # What the model read in its second call: the exception's class and message.
    tool_msg = state.requests[1].body["messages"][-1]
    assert tool_msg == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Error: tool weather failed: ConnectionError: weather service unreachable "
        "for Oslo",
    }
    assert [(n.kind, n.status) for n in prog.nodes.values()] == [
        ("llm", "ok"),
        ("tool", "error"),
        ("llm", "ok"),
    ]
    assert prog.status == "ok"


async def test_on_error_raise_ends_the_program_per_tool_or_per_runtime(
    server: FakeServer, state: FakeState
) -> None:
    turns = _failing_turns("weather")
    state.reply = lambda body: next(turns)
    async with Runtime(cfg(server)) as rt:
        with pytest.raises(ConnectionError, match="unreachable"):
            async with rt.program("strict tool") as prog:
                await agentrt.react("Weather?", [_weather(on_error="raise")])
    assert prog.status == "error" and len(state.requests) == 1
    # Runtime-wide "raise"; a tool saying "return" still returns.
    async with Runtime(cfg(server, tool_on_error="raise")) as rt, rt.program("strict rt"):
        with pytest.raises(ConnectionError):
            await _weather()(city="Oslo")
        (returned,) = await agentrt.execute_tool_calls(
            [tool_call("weather", '{"city": "Bergen"}')], [_weather(on_error="return")]
        )
    assert returned.content.endswith("ConnectionError: weather service unreachable for Bergen")
    # A direct call of a returning tool raises the ToolFailed (there is no model to read it).
    async with Runtime(cfg(server)) as rt, rt.program("direct"):
        with pytest.raises(agentrt.ToolFailed) as caught:
            await _weather()(city="Oslo")
    assert isinstance(caught.value.__cause__, ConnectionError)


def test_error_modes_are_validated_and_side_effects_raise_by_default() -> None:
    with pytest.raises(ConfigError, match="on_error"):
        _weather(on_error="ignore")
    with pytest.raises(ConfigError, match="tool_on_error"):
        RuntimeConfig(base_url="http://127.0.0.1:9/v1", tool_on_error="ignore")  # type: ignore[arg-type]
    assert _weather().error_mode("return") == "return"
    assert _weather().error_mode("raise") == "raise"
    assert _weather(side_effect=True).error_mode("return") == "raise"
    assert _weather(side_effect=True, on_error="return").error_mode("raise") == "return"


async def test_side_effect_errors_keep_the_journal_semantics(
    server: FakeServer, state: FakeState, tmp_path: Any
) -> None:
    attempts: list[str] = []

    @tool(side_effect=True)
    async def charge(amount: int, key: IdempotencyKey) -> str:
        """Charge a card."""
        attempts.append(key)
        raise ConnectionError("card network timed out after sending")

    @tool(name="charge", side_effect=True, on_error="return")
    async def charge_returning(amount: int, key: IdempotencyKey) -> str:
        """Charge a card."""
        attempts.append(key)
        raise UnknownOutcome("sent, no answer", key=key)

    journal = str(tmp_path / "journal.sqlite")
    async with Runtime(cfg(server, journal=journal)) as rt:
        # Default for a side effect: the exception ends the program (the row is FAILED).
        with pytest.raises(ConnectionError):
            async with rt.program("pay", program_id="pay-err-1"):
                await agentrt.execute_tool_calls([tool_call("charge", '{"amount": 5}')], [charge])
        # An unknown outcome is never handed to the model, even by a tool that returns errors;
        # the re-run surfaces it instead of charging again.
        for _ in range(2):
            with pytest.raises(UnknownOutcome):
                async with rt.program("pay", program_id="pay-err-2"):
                    await agentrt.execute_tool_calls(
                        [tool_call("charge", '{"amount": 5}')], [charge_returning]
                    )
    assert len(attempts) == 2  # once per program: the re-run of pay-err-2 did not run it
