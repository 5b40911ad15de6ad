"""Request bodies on the fast path that arrive in many reads (agentrt_serving.direct's
``BodyParts``: the reads kept as they come, joined once): intact to the backend, the body
limit by declared length and by bytes received, a slow body's 408, 100-continue, and the next
pipelined request on the same keep-alive connection after a large body. Over real HTTP: a
controller in front of a fake OpenAI server."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest

from agentrt_serving.direct import BodyParts
from agentrt_serving.hardening import HttpLimits

from .conftest import chat_body, running
from .fake_openai import FakeState
from .test_fast_path import CHAT, _answers, _exchange, _request

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def _long_body(words: int) -> tuple[bytes, str]:
    """A chat body with one user message of ``words`` distinct words, and that message."""
    content = " ".join(f"w{i}" for i in range(words))
    return json.dumps(chat_body(messages=[{"role": "user", "content": content}])).encode(), content


async def _trickle(url: str, data: bytes, piece: int, *, pause_s: float = 0.0) -> bytes:
    """Send ``data`` in writes of ``piece`` bytes on one connection — with ``pause_s``, a
    wait for an answer after each (sending stops once one comes: bytes sent after the server
    closed would reset the connection and lose its answer); what the server answers until it
    closes or falls silent."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    out = b""
    async with await anyio.connect_tcp(parts.hostname, parts.port) as stream:
        for start in range(0, len(data), piece):
            try:
                await stream.send(data[start : start + piece])
            except (anyio.BrokenResourceError, OSError):
                break  # answered and closed
            if pause_s:
                with anyio.move_on_after(pause_s):
                    try:
                        out += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        return out
                if out:
                    break
        while True:
            with anyio.move_on_after(1.0) as silent:
                try:
                    chunk = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
            if silent.cancelled_caught:
                break
            out += chunk
        return out


def test_body_parts_keep_the_reads_in_order_and_gather_short_ones() -> None:
    body = BodyParts()
    reads = [b"a" * 70_000, b"b", b"cc", b"d" * 5000, b"e" * 3, b"f" * 100_000, b"g"]
    for read in reads:
        body += read
    assert len(body) == sum(map(len, reads)) and body
    assert b"".join(body.parts) == b"".join(reads)
    # The big reads kept as they came (no copy); the short ones after a short one gathered.
    assert body.parts[0] is reads[0] and body.parts[2] is reads[3] and body.parts[4] is reads[5]
    assert [type(p) for p in body.parts] == [bytes, bytearray, bytes, bytes, bytes, bytes]
    trickled = BodyParts()
    for _ in range(10_000):
        trickled += b"x"
    assert len(trickled) == 10_000 and len(trickled.parts) == 1
    assert not BodyParts()


async def test_a_long_body_in_many_small_writes_reaches_the_backend_intact() -> None:
    state = FakeState()
    body, content = _long_body(60_000)  # ~0.4 MB: past the protocol's high-water mark
    async with running(state) as svc:
        raw = await _trickle(svc.url, _request(CHAT, body, close=True), 3000)
        trickled = await _trickle(svc.url, _request(CHAT, body[:9000], close=True), 7)
        assert svc.app.direct_calls == 2
    (answer,) = _answers(raw)
    assert answer[0] == 200, answer
    assert state.requests[0]["messages"] == [{"role": "user", "content": content}]
    (refused,) = _answers(trickled)  # cut short: not JSON, but every byte was read
    assert refused[0] == 400 and refused[1]["connection"] == "close"


async def test_the_next_pipelined_request_after_a_large_body_is_answered() -> None:
    state = FakeState()
    body, content = _long_body(100_000)  # ~0.7 MB, several reads, reading paused between
    async with running(state) as svc:
        pipelined = (
            _request(CHAT, body)
            + _request(CHAT, json.dumps(chat_body()).encode())
            + _request(CHAT, body, close=True)
        )
        raw = await _exchange(svc.url, pipelined)
        assert svc.app.direct_calls == 3
    answers = _answers(raw)
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert [r["messages"][0]["content"] for r in state.requests] == [content, "hello", content]


async def test_the_body_limit_by_declared_length_and_by_bytes_received_in_many_reads() -> None:
    async with running(FakeState(), max_body_bytes=64_000) as svc:
        body, _ = _long_body(20_000)  # ~0.13 MB declared: refused before its body is sent
        declared = await _trickle(
            svc.url, _request(CHAT, body).split(b"\r\n\r\n")[0] + b"\r\n\r\n", 10
        )
        # Chunked (no length declared): 1,000-byte chunks in 1,500-byte writes, each read by
        # the server before the next, up to just past the limit.
        chunked = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"".join(b"3e8\r\n" + b"a" * 1000 + b"\r\n" for _ in range(65))
        )
        received = await _trickle(svc.url, chunked, 1500, pause_s=0.002)
        under, _ = _long_body(5000)  # ~29 KB: under the limit, in many reads
        accepted = await _trickle(svc.url, _request(CHAT, under, close=True), 999)
    for raw in (declared, received):
        (answer,) = _answers(raw)
        assert answer[0] == 413 and answer[1]["connection"] == "close", answer
        assert "request body over 64000 bytes" in json.loads(answer[2])["error"]["message"]
    (ok,) = _answers(accepted)
    assert ok[0] == 200


async def test_a_body_trickling_past_its_time_is_a_408(monkeypatch: pytest.MonkeyPatch) -> None:
    def quick(cls: type[HttpLimits], config: Any) -> HttpLimits:
        return cls(max_body_bytes=config.max_body_bytes, body_timeout_s=0.5)

    monkeypatch.setattr(HttpLimits, "from_config", classmethod(quick))
    body, _ = _long_body(2000)
    async with running(FakeState()) as svc:
        # 50 bytes every 0.05 s: the body would take far longer than the 0.5 s allowed.
        raw = await _trickle(svc.url, _request(CHAT, body)[:3000], 50, pause_s=0.05)
    (answer,) = _answers(raw)
    assert answer[0] == 408 and answer[1]["connection"] == "close"
    assert "not received within 0.5 s" in json.loads(answer[2])["error"]["message"]


async def test_100_continue_then_a_long_body_in_parts() -> None:
    state = FakeState()
    body, content = _long_body(40_000)
    async with running(state) as svc:
        parts = urlsplit(svc.url)
        assert parts.hostname is not None and parts.port is not None
        head = _request(CHAT, body, b"expect: 100-continue\r\n").split(b"\r\n\r\n")[0]
        async with await anyio.connect_tcp(parts.hostname, parts.port) as stream:
            await stream.send(head + b"\r\n\r\n")
            with anyio.fail_after(5):
                interim = await stream.receive()
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            for start in range(0, len(body), 65_536):
                await stream.send(body[start : start + 65_536])
            out = b""
            with anyio.fail_after(5):
                while b'"usage"' not in out:
                    out += await stream.receive()
    (answer,) = _answers(out)
    assert answer[0] == 200
    assert state.requests[0]["messages"][0]["content"] == content
