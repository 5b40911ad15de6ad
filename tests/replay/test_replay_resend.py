"""Calls whose stream is cut, or that a gateway answers 503, are re-sent; other failures end
their program with a message that names them (not the task group that carried them).

The faults are injected by an ASGI middleware between the recorder and a real emulator on
loopback: it cuts a stream after its first content (the connection closes without the end of
the chunked body, as when a controller replica is SIGKILLed), drops the ``[DONE]`` of a
finished answer, or answers 503 / 400 itself, on the n-th attempt of a chosen trace node.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from agentrt.errors import ConfigError, EndpointUnavailable, LLMCallError
from agentrt_controller.service.errors import UpstreamFailed
from agentrt_sim.replay.records import ProgramResult, ReplayResult
from agentrt_sim.replay.runner import HEADER_REPLAY_NODE, ReplayConfig, describe_error, replay
from agentrt_sim.replay.stream import UPSTREAM_ERROR_TYPE, StreamCut, resendable
from agentrt_sim.replay.summary import summarize_replay
from agentrt_sim.workloads.program import LLMNode

from .helpers import RecordedEmulator, recording_emulator, small_trace
from .test_replay_emulator import TRACE_PROMPTS

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SCALE = 10.0

#: What the middleware does to one attempt: pass it on, cut its stream after the first
#: content, drop its ``[DONE]``, answer a stream that ends in an error event (a controller's
#: ``upstream_error``, or an engine's with code 500), or answer this status itself.
Fault = Literal["pass", "cut", "no-done", "upstream-event", "engine-event"] | int

_ERROR_EVENTS = {
    # As agentrt_controller.service.http.proxy sends it when a backend fails mid-answer.
    "upstream-event": {
        "message": "backend b1 failed mid-answer: connection reset",
        "type": UpstreamFailed.error_type,
        "param": None,
        "code": None,
    },
    # As the emulator (and vLLM) send an engine error mid-stream.
    "engine-event": {"message": "engine died", "type": "InternalServerError", "code": 500},
}

#: A stream chunk carrying content (the emulator's JSON has a space after the colon).
_CONTENT = re.compile(rb'"content": ?"[^"]')

#: (program id, trace node id) -> the fault of each attempt, in order; later ones pass.
Plan = Mapping[tuple[str, str], Sequence[Fault]]


@dataclass
class Faults:
    """ASGI middleware applying a :data:`Plan` to ``/v1/chat/completions``."""

    app: Any
    plan: Plan
    attempts: Counter[tuple[str, str]] = field(default_factory=Counter)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/chat/completions"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        key = (
            headers.get("x-agentrt-program-id", ""),
            headers.get(HEADER_REPLAY_NODE.lower(), ""),
        )
        attempt = self.attempts[key]
        self.attempts[key] += 1
        faults = self.plan.get(key, ())
        fault = faults[attempt] if attempt < len(faults) else "pass"
        if isinstance(fault, int):
            await send({"type": "http.response.start", "status": fault, "headers": []})
            await send({"type": "http.response.body", "body": b'{"error": "injected"}'})
            return
        if fault == "pass":
            await self.app(scope, receive, send)
            return
        if fault in _ERROR_EVENTS:
            chunk = {"choices": [{"index": 0, "delta": {"content": "Partial"}}]}
            events = [json.dumps(chunk), json.dumps({"error": _ERROR_EVENTS[fault]})]
            body = b"".join(f"data: {event}\n\n".encode() for event in events)
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        cut = False

        async def faulty(message: Any) -> None:
            nonlocal cut
            if message["type"] != "http.response.body" or cut:
                if not cut:
                    await send(message)
                return
            body: bytes = message.get("body", b"")
            if fault == "no-done":
                # The whole answer and the end of the body, but no [DONE] event.
                await send({**message, "body": body.replace(b"data: [DONE]\n\n", b"")})
                return
            if _CONTENT.search(body):
                # First content through, then nothing more: the app's return leaves the
                # chunked body unfinished and uvicorn closes the connection.
                cut = True
                await send({**message, "more_body": True})
                return
            await send(message)

        await self.app(scope, receive, faulty)


async def _replay(plan: Plan, max_retries: int = 2) -> tuple[ReplayResult, RecordedEmulator]:
    async with recording_emulator(SCALE, wrap=lambda app: Faults(app, plan)) as emulator:
        config = ReplayConfig(
            emulator.openai_base_url,
            time_scale=SCALE,
            max_retries=max_retries,
            retry_backoff_s=0.01,
        )
        result, _ = await replay(small_trace(), config)
    return result, emulator


def _programs(result: ReplayResult) -> dict[str, ProgramResult]:
    return {p.program.program_id: p for p in result.programs}


def _sends(emulator: RecordedEmulator) -> Counter[tuple[str, str]]:
    return Counter(
        (s.header("X-Agentrt-Program-Id") or "", s.header(HEADER_REPLAY_NODE) or "")
        for s in emulator.recorder.tagged()
    )


async def test_cut_streams_and_503s_are_resent_and_every_program_finishes() -> None:
    plan: Plan = {
        ("chain-1", "c2"): ["cut"],
        ("fan-1", "m1"): ["cut", 503],
        ("fan-1", "r"): ["upstream-event"],
        ("chain-2", "c0"): ["no-done"],
    }
    result, emulator = await _replay(plan)
    programs = _programs(result)
    assert all(p.finished for p in result.programs), [p.error for p in result.programs]
    resent = {(pid, n): c.resent for pid, p in programs.items() for n, c in p.calls.items()}
    assert resent == {key: len(plan.get(key, ())) for key in TRACE_PROMPTS}
    sends = _sends(emulator)
    assert sends == {key: 1 + len(plan.get(key, ())) for key in TRACE_PROMPTS}
    for program in result.programs:
        for node in program.program.nodes:
            if isinstance(node, LLMNode):
                record = program.calls[node.node_id]
                # Usage and text from the attempt that answered: whole answers only, so
                # the next calls' prompts (which carry them) are sized exactly.
                assert record.output_tokens == node.output_tokens
                assert (
                    record.prompt_tokens == TRACE_PROMPTS[program.program.program_id, node.node_id]
                )
                assert record.span.release_s <= record.first_token_s <= record.span.finish_s
    # The first token is the answering attempt's: the cut one streamed content before the
    # re-send, so its first token would come before the re-send reached the server.
    c2 = programs["chain-1"].calls["c2"]
    first_send, resend = (
        s.start_s
        for s in emulator.recorder.tagged()
        if s.header(HEADER_REPLAY_NODE) == "c2" and s.header("X-Agentrt-Program-Id") == "chain-1"
    )
    assert c2.first_token_s - c2.span.release_s >= resend - first_send
    summary = summarize_replay(result, scale=SCALE, warmup_s=0.0, window_end_s=2.0)
    assert summary["programs_failed"] == 0 and summary["programs_completed"] == 3
    assert summary["calls_resent"] == 4 and summary["resends"] == 5


@pytest.mark.parametrize("max_retries", [0, 2])
async def test_a_call_cut_every_time_fails_its_program_naming_the_cut(max_retries: int) -> None:
    plan: Plan = {("chain-1", "c2"): ["cut"] * 3}
    result, emulator = await _replay(plan, max_retries=max_retries)
    programs = _programs(result)
    error = programs["chain-1"].error
    assert error is not None
    assert "stream cut before [DONE]" in error and "RemoteProtocolError" in error
    if max_retries:
        assert error.startswith("LLMCallError: call c2 failed 3 times (--max-retries 2)")
    else:
        assert error.startswith("StreamCut: POST ")
    assert programs["chain-1"].calls["c2"].resent == max_retries
    assert _sends(emulator)["chain-1", "c2"] == 1 + max_retries
    assert "c4" not in programs["chain-1"].calls  # the program ended at its failed call
    assert programs["fan-1"].finished and programs["chain-2"].finished
    summary = summarize_replay(result, scale=SCALE, warmup_s=0.0, window_end_s=2.0)
    assert summary["programs_failed"] == 1 and summary["errors"] == [error]
    assert summary["calls_resent"] == (1 if max_retries else 0)
    assert summary["resends"] == max_retries


async def test_an_engine_error_event_is_not_resent() -> None:
    result, emulator = await _replay({("chain-2", "c0"): ["engine-event"]})
    chain = _programs(result)["chain-2"]
    assert chain.error is not None
    assert chain.error.startswith("LLMCallError: POST ") and "engine died" in chain.error
    assert chain.calls["c0"].resent == 0 and _sends(emulator)["chain-2", "c0"] == 1


async def test_an_error_answer_is_not_resent_and_names_itself_not_the_task_group() -> None:
    # fan-1's m0 runs in a forked thread: its error reaches the program through two task
    # groups (agentrt.parallel's and the thread's own).
    result, emulator = await _replay({("fan-1", "m0"): [400]})
    fan = _programs(result)["fan-1"]
    assert fan.error is not None
    assert fan.error.startswith("LLMCallError: POST ") and "answered 400" in fan.error
    assert "ExceptionGroup" not in fan.error and "TaskGroup" not in fan.error
    assert fan.calls["m0"].resent == 0
    assert _sends(emulator)["fan-1", "m0"] == 1
    assert _programs(result)["chain-1"].finished


def test_describe_error_names_the_first_leaf_and_counts_the_others() -> None:
    inner = ExceptionGroup("inner", [ValueError("bad value"), KeyError("k")])
    outer = ExceptionGroup("unhandled errors in a TaskGroup", [inner, OSError("disk")])
    assert describe_error(outer) == "ValueError: bad value (and 2 more errors)"
    assert describe_error(ExceptionGroup("g", [TimeoutError("late")])) == "TimeoutError: late"
    assert describe_error(RuntimeError("plain")) == "RuntimeError: plain"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (StreamCut("cut"), True),
        (EndpointUnavailable("refused"), True),
        (LLMCallError("no replica up", status_code=503), True),
        (LLMCallError("bad gateway", status_code=502), True),
        (LLMCallError("deadline passed", status_code=504), False),
        (LLMCallError("server bug", status_code=500), False),
        (LLMCallError("too many", status_code=429), False),
        (LLMCallError("bad request", status_code=400), False),
        (LLMCallError("malformed event"), False),
    ],
)
def test_what_is_resendable(error: LLMCallError, expected: bool) -> None:
    assert resendable(error) is expected


def test_the_upstream_error_type_is_the_controllers() -> None:
    assert UpstreamFailed.error_type == UPSTREAM_ERROR_TYPE
    assert UpstreamFailed.status_code == 502


def test_negative_max_retries_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="--max-retries must be >= 0"):
        ReplayConfig("http://127.0.0.1:1/v1", max_retries=-1)
