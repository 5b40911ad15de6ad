"""Program identity from other clients' conventions — vLLM router's
``vllm_xargs.agentic_context`` and the common session headers — lands in the same process
table as our own tags (which come first); what names a program never goes upstream. Also:
large request bodies are decoded off the event loop."""

from __future__ import annotations

import json
from typing import Any

import anyio.to_thread
import pytest

from agentrt.protocol import CallTags
from agentrt_controller.service.errors import BadRequest
from agentrt_controller.service.http import incoming
from agentrt_controller.service.http.identity import ForeignIdentity, foreign_identity
from tests.controller_service.conftest import running
from tests.controller_service.fake_openai import FakeState

pytestmark = pytest.mark.timeout(30)


def _context(value: Any) -> dict[str, Any]:
    return {"model": "m", "vllm_xargs": {"agentic_context": value}}


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        (_context({"program_id": "task-a:researcher"}), {},
         ForeignIdentity("agentic_context", "task-a:researcher", "task-a:researcher")),
        (_context(json.dumps({"program_id": "p1", "session_id": "s1"})), {},
         ForeignIdentity("agentic_context", "s1", "p1")),
        (_context({"task_id": "task-b", "agent_id": "worker"}), {},
         ForeignIdentity("agentic_context", "task-b", "task-b:worker")),
        (_context({"session_id": "s2"}), {}, ForeignIdentity("agentic_context", "s2", "s2:lead")),
        # The body's contract comes before any header.
        (_context({"program_id": "p3"}), {"x-session-id": "h"},
         ForeignIdentity("agentic_context", "p3", "p3")),
        ({}, {"x-claude-code-session-id": "c1", "x-claude-code-agent-id": "sub",
              "session_id": "codex"},
         ForeignIdentity("x-claude-code-session-id", "c1", "c1:sub")),
        ({}, {"session_id": "codex-1", "x-session-id": "generic"},
         ForeignIdentity("session_id", "codex-1", "codex-1:lead")),
        ({}, {"session-id": "codex-2", "thread-id": "t9"},
         ForeignIdentity("session-id", "codex-2", "codex-2:t9")),
        ({}, {"x-session-id": "generic"},
         ForeignIdentity("x-session-id", "generic", "generic:lead")),
        # Per-request ids never name a program; an empty context names none either.
        ({}, {"x-request-id": "r1", "x-client-request-id": "r2", "traceparent": "00-a-b-01"}, None),
        (_context({}), {}, None),
        (_context(None), {}, None),
    ],
)  # fmt: skip
def test_foreign_conventions_map_onto_our_ids(
    body: dict[str, Any], headers: dict[str, str], expected: ForeignIdentity | None
) -> None:
    assert foreign_identity(body, headers) == expected


def test_ids_outside_our_alphabet_become_stable_digests() -> None:
    first = foreign_identity({}, {"x-session-id": "späce id ✓"})
    again = foreign_identity({}, {"x-session-id": "späce id ✓"})
    other = foreign_identity({}, {"x-session-id": "späce id ✗"})
    assert first is not None and other is not None
    assert first == again and first.session_id.startswith("h-") and len(first.session_id) == 26
    assert first.program_id != other.program_id
    long = foreign_identity({}, {"x-session-id": "s" * 128})  # ":lead" makes it 133
    assert long is not None and long.session_id == "s" * 128 and long.program_id.startswith("h-")


@pytest.mark.parametrize(
    "context",
    ["{not json", [1, 2], 7, {"program_id": []}, {"task_id": True}, {"program_id": " "}],
)
def test_a_malformed_agentic_context_is_refused(context: Any) -> None:
    with pytest.raises(BadRequest):
        foreign_identity(_context(context), {})


# --- through the controller -----------------------------------------------------------------


def _programs(table: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["session_id"], e["program_id"]): e for e in table["entries"]}


@pytest.mark.anyio
async def test_session_headers_and_agentic_context_fill_the_process_table() -> None:
    state = FakeState()
    ours = CallTags(session_id="ours", program_id="p-ours", thread_id="main", node_id="n")
    context = {"vllm_xargs": {"agentic_context": {"task_id": "t1", "agent_id": "a"}, "k": 1}}
    async with running(state) as svc:
        for _ in range(2):
            assert (await svc.chat(headers={"x-session-id": "sess-1"})).status_code == 200
        assert (await svc.chat(**context)).status_code == 200
        assert (
            await svc.chat(headers={**ours.to_headers(), "x-session-id": "x"})
        ).status_code == 200
        assert (await svc.chat(headers={"x-request-id": "only-a-request"})).status_code == 200
        bad = await svc.chat(vllm_xargs={"agentic_context": "{broken"})
        table = (await svc.http.get(svc.url + "/agentrt/v1/programs")).json()
    programs = _programs(table)
    assert set(programs) == {("sess-1", "sess-1:lead"), ("t1", "t1:a"), ("ours", "p-ours")}
    assert programs["sess-1", "sess-1:lead"]["calls_finished"] == 2
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "vllm_xargs"
    # Upstream: the router's context taken out (other vllm_xargs kept), no identity header.
    assert state.requests[2]["vllm_xargs"] == {"k": 1}
    assert all("agentic_context" not in json.dumps(body) for body in state.requests)
    assert not [h for sent in state.headers for h in sent if h in ("x-session-id", "session_id")]


# --- large bodies ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_large_bodies_are_decoded_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    threaded: list[int] = []
    real = anyio.to_thread.run_sync

    async def counting(function: Any, *args: Any, **kwargs: Any) -> Any:
        threaded.append(len(args[0]))
        return await real(function, *args, **kwargs)

    monkeypatch.setattr(incoming.anyio.to_thread, "run_sync", counting)
    small = json.dumps({"model": "m", "messages": []}).encode()
    big = json.dumps({"model": "m", "prompt": "x" * incoming.THREAD_DECODE_BYTES}).encode()
    assert await incoming.decode_body(small) == {"model": "m", "messages": []}
    assert threaded == []
    decoded = await incoming.decode_body(big)
    assert threaded == [len(big)] and len(decoded["prompt"]) == incoming.THREAD_DECODE_BYTES
    with pytest.raises(BadRequest):
        await incoming.decode_body(big[:-1])


@pytest.mark.anyio
async def test_a_large_call_goes_through_the_controller() -> None:
    state = FakeState()
    content = "word " * (incoming.THREAD_DECODE_BYTES // 4)
    async with running(state, max_body_bytes=8 * incoming.THREAD_DECODE_BYTES) as svc:
        response = await svc.chat(messages=[{"role": "user", "content": content}])
    assert response.status_code == 200
    assert state.requests[0]["messages"][0]["content"] == content
