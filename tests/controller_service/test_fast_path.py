"""The fast path (service/http/direct.py) over real HTTP: taken for the two hot routes only,
and answering like the ASGI path (``http_path = "asgi"``) for every hardening property —
limits, errors, authentication, identity, the access log, metrics, tracing, keep-alive,
pipelining, 100-continue, draining, disconnects and crashes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_serving.hardening import HttpLimits
from agentrt_serving.logs import ACCESS_LOGGER

from .conftest import Running, chat_body, controller, fake_backends, running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CHAT = "/v1/chat/completions"
PATHS = ("direct", "asgi")
KEY = "sk-tenant-a"


def _request(
    path: str, body: bytes, extra: bytes = b"", *, method: bytes = b"POST", close: bool = False
) -> bytes:
    head = b"%s %s HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n" % (
        method,
        path.encode(),
    )
    if close:
        head += b"connection: close\r\n"
    return head + extra + b"content-length: %d\r\n\r\n" % len(body) + body


async def _exchange(url: str, data: bytes, *, until_closed: bool = True) -> bytes:
    """Send ``data`` on a new connection; everything read until the server closes it (or
    1 s of silence)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    async with await anyio.connect_tcp(parts.hostname, parts.port) as stream:
        await stream.send(data)
        out = b""
        while True:
            with anyio.move_on_after(1.0 if until_closed else 0.5) as silent:
                try:
                    chunk = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    break
            if silent.cancelled_caught:
                break
            out += chunk
        return out


def _answers(raw: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The HTTP/1.1 answers in ``raw`` (content-length or chunked bodies)."""
    answers = []
    while raw.startswith(b"HTTP/1.1 "):
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.decode().lower()] = value.decode().strip()
        if status == 100:
            raw = rest
            continue
        if "content-length" in headers:
            size = int(headers["content-length"])
            body, raw = rest[:size], rest[size:]
        else:
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line, 16)
                body, rest = body + rest[:size], rest[size + 2 :]
                if size == 0:
                    break
            raw = rest
        answers.append((status, headers, body))
    return answers


def _comparable(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, dict[str, str], Any]:
    """An answer without what differs between two servers (date, queue time, ids)."""
    status, headers, body = answer
    kept = {k: v for k, v in headers.items() if k not in ("date", "x-agentrt-queue-ms")}
    try:
        value: Any = json.loads(body)
    except ValueError:
        value = body
    if isinstance(value, dict):
        value.pop("id", None)
        value.pop("created", None)
    return status, kept, value


@pytest.fixture
async def both() -> AsyncIterator[dict[str, Running]]:
    """The same controller twice, with the fast path and without."""
    state = FakeState()
    async with (
        running(state, http_path="direct") as direct,
        running(state, http_path="asgi") as asgi,
    ):
        yield {"direct": direct, "asgi": asgi}


GOOD = json.dumps(chat_body()).encode()
BAD: list[tuple[str, bytes, bytes]] = [
    # (case, body, extra header lines)
    ("truncated json", b'{"model":', b""),
    ("empty body", b"", b""),
    ("json array", b"[1, 2]", b""),
    ("unknown model", json.dumps(chat_body(model="nope")).encode(), b""),
    ("lone surrogate", b'{"model":"tiny","messages":[{"role":"user","content":"\\ud800"}]}', b""),
    ("deep nesting", b'{"a":' + b"[" * 200 + b"]" * 200 + b"}", b""),
    ("huge integer", b'{"model":"tiny","max_tokens":99999999999999999999999}', b""),
    ("non-ascii forwarded header", GOOD, "x-request-id: \u00e9\r\n".encode("latin-1")),
    ("numeric header out of range", GOOD, b"x-agentrt-timeout-ms: 99999999999999999999\r\n"),
    ("bad timeout header", GOOD, b"x-agentrt-timeout-ms: soon\r\n"),
    ("bad n", json.dumps(chat_body(n=0)).encode(), b""),
]


@pytest.mark.parametrize(("case", "body", "extra"), BAD, ids=[c for c, _, _ in BAD])
async def test_refusals_are_the_same_on_both_paths(
    both: dict[str, Running], case: str, body: bytes, extra: bytes
) -> None:
    answers = {}
    for name, svc in both.items():
        before = svc.app.direct_calls
        raw = await _exchange(svc.url, _request(CHAT, body, extra, close=True))
        (answers[name],) = _answers(raw)
        assert svc.app.direct_calls - before == (1 if name == "direct" else 0)
    assert 400 <= answers["direct"][0] < 500, answers["direct"]
    assert _comparable(answers["direct"]) == _comparable(answers["asgi"])
    assert set(json.loads(answers["direct"][2])["error"]) == {"message", "type", "param", "code"}


async def test_a_call_and_a_stream_take_the_fast_path_and_answer_alike(
    both: dict[str, Running],
) -> None:
    answers: dict[str, list[Any]] = {}
    for name, svc in both.items():
        before = svc.app.direct_calls
        whole = await svc.chat()
        streamed = await svc.chat(stream=True)
        text = await svc.http.post(
            svc.url + "/v1/completions", json={"model": "tiny", "prompt": "hi"}
        )
        health = await svc.http.get(svc.url + "/health")  # not a fast route
        models = await svc.http.get(svc.url + "/v1/models")
        assert svc.app.direct_calls - before == (3 if name == "direct" else 0)
        for response in (whole, streamed, text, health, models):
            assert response.status_code == 200, response.text
        assert streamed.headers["content-type"].startswith("text/event-stream")
        assert streamed.text.rstrip().endswith("data: [DONE]")
        answers[name] = [
            sorted(k for k in whole.headers if k != "date"),
            sorted(k for k in streamed.headers if k != "date"),
            whole.json()["usage"],
            len(re.findall(r"^data: ", streamed.text, re.M)),
            text.json()["usage"],
        ]
    assert answers["direct"] == answers["asgi"]


async def test_a_query_string_or_another_method_takes_the_asgi_way() -> None:
    async with running(FakeState()) as svc:
        with_query = await svc.http.post(svc.url + CHAT + "?x=1", json=chat_body())
        get = await svc.http.get(svc.url + CHAT)
        assert svc.app.direct_calls == 0
        assert with_query.status_code == 200
        assert get.status_code == 405 and get.headers["allow"] == "POST"


async def test_keep_alive_and_pipelining_mixing_fast_and_asgi_routes() -> None:
    async with running(FakeState()) as svc:
        completion = json.dumps({"model": "tiny", "prompt": "hi"}).encode()
        pipelined = (
            _request(CHAT, GOOD)
            + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            + _request(CHAT, json.dumps(chat_body(stream=True)).encode())
            + _request("/v1/completions", completion)
            + _request(CHAT, b'{"model":', close=True)
        )
        raw = await _exchange(svc.url, pipelined)
        answers = _answers(raw)
        assert [status for status, _, _ in answers] == [200, 200, 200, 200, 400]
        assert json.loads(answers[0][2])["object"] == "chat.completion"
        assert json.loads(answers[1][2]) == {"status": "ok"}
        assert answers[2][2].rstrip().endswith(b"data: [DONE]")
        assert json.loads(answers[3][2])["object"] == "text_completion"
        assert answers[4][1]["connection"] == "close"
        assert svc.app.direct_calls == 4


async def test_expect_100_continue_is_answered_before_the_body() -> None:
    async with running(FakeState()) as svc:
        parts = urlsplit(svc.url)
        assert parts.hostname is not None and parts.port is not None
        head = _request(CHAT, GOOD, b"expect: 100-continue\r\n").split(b"\r\n\r\n")[0]
        async with await anyio.connect_tcp(parts.hostname, parts.port) as stream:
            await stream.send(head + b"\r\n\r\n")
            with anyio.fail_after(5):
                interim = await stream.receive()
            assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
            await stream.send(GOOD)
            out = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
            with anyio.fail_after(5):
                while b'"usage"' not in out:
                    out += await stream.receive()
        (answer,) = _answers(out)
        assert answer[0] == 200
        assert svc.app.direct_calls == 1


async def test_head_limit_body_limit_and_connection_limit_on_the_fast_routes() -> None:
    options = {"max_body_bytes": 4096, "max_header_bytes": 8192, "max_concurrency": 8}
    async with running(FakeState(), **options) as svc:
        # A head over the limit in one read (the guard's 431), and trickled (the protocol's).
        raw = await _exchange(svc.url, _request(CHAT, GOOD, b"x-big: " + b"a" * 9000 + b"\r\n"))
        assert raw.startswith(b"HTTP/1.1 431 ")
        parts = urlsplit(svc.url)
        assert parts.hostname is not None and parts.port is not None
        async with await anyio.connect_tcp(parts.hostname, parts.port) as stream:
            await stream.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            trickled = b""
            for _ in range(12):
                try:
                    await stream.send(b"x-more: " + b"a" * 1000 + b"\r\n")
                except (anyio.BrokenResourceError, OSError):
                    break  # answered and closed
                await anyio.sleep(0.01)
            with (
                anyio.fail_after(5),
                contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError),
            ):
                trickled = await stream.receive()
        assert trickled.startswith(b"HTTP/1.1 431 ") or trickled == b""
        # A declared body over the limit: 413 before it is sent; a read one: 413 too.
        declared = _request(CHAT, b"").replace(b"content-length: 0", b"content-length: 5000")
        (refused,) = _answers(await _exchange(svc.url, declared))
        assert refused[0] == 413 and refused[1]["connection"] == "close"
        chunked = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\n\r\n"
            + b"1000\r\n" + b"a" * 0x1000 + b"\r\n" + b"1000\r\n" + b"a" * 0x1000 + b"\r\n"
        )  # fmt: skip
        assert (await _exchange(svc.url, chunked)).startswith(b"HTTP/1.1 413 ")
        # Connections past the limit: uvicorn's 503 (not taken by the fast path).
        held = [await anyio.connect_tcp(parts.hostname, parts.port) for _ in range(8)]
        try:
            await anyio.sleep(0.2)
            refused_call = await svc.chat()
        finally:
            for stream in held:
                await stream.aclose()
        assert refused_call.status_code == 503
        assert svc.app.direct_calls == 3  # 431 (one read), 413 declared, 413 read


async def test_a_slow_head_on_a_fast_route_is_dropped_within_the_timeout() -> None:
    async with running(FakeState(), header_timeout_s=0.5) as svc:
        parts = urlsplit(svc.url)
        assert parts.hostname is not None and parts.port is not None
        async with await anyio.connect_tcp(parts.hostname, parts.port) as stream:
            await stream.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            closed = False
            with anyio.fail_after(3):
                for _ in range(40):
                    try:
                        await stream.send(b"X")
                        with anyio.move_on_after(0.1):
                            if not await stream.receive():
                                closed = True
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        closed = True
                    if closed:
                        break
        assert closed


async def test_keys_tenants_identity_and_the_access_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    lines: dict[str, list[dict[str, Any]]] = {}
    for path in PATHS:
        async with running(FakeState(), api_key=KEY, access_log="json", http_path=path) as svc:
            caplog.clear()
            missing = await svc.chat()
            wrong = await svc.chat(headers={"Authorization": "Bearer nope"})
            keyed = {"Authorization": f"Bearer {KEY}"}
            tagged = await svc.chat(
                headers={**keyed, "X-Agentrt-Session-Id": "s1", "X-Agentrt-Program-Id": "p1"}
            )
            claude = await svc.chat(
                headers={**keyed, "x-claude-code-session-id": "cc1"}, stream=True
            )
            metrics = (await svc.http.get(svc.url + "/metrics")).text
            assert (missing.status_code, wrong.status_code) == (401, 401)
            assert missing.headers["www-authenticate"] == "Bearer"
            assert tagged.status_code == 200 and claude.status_code == 200
            assert 'agentrt_controller_tenant_refusals_total{status="401",tenant=""} 2' in metrics
            assert 'status="200"' in metrics and "agentrt_controller_requests_total" in metrics
            assert svc.app.direct_calls == (4 if path == "direct" else 0)
            lines[path] = [
                {
                    k: v
                    for k, v in json.loads(r.getMessage()).items()
                    if k not in ("time", "latency_ms", "backend")
                }
                for r in caplog.records
                if r.name == ACCESS_LOGGER and "/v1/chat" in r.getMessage()
            ]
    assert lines["direct"] == lines["asgi"]
    assert [line["status"] for line in lines["direct"]] == [401, 401, 200, 200]
    assert [line["tenant"] for line in lines["direct"]] == [None, None, "default", "default"]
    assert (lines["direct"][2]["session"], lines["direct"][2]["program"]) == ("s1", "p1")
    assert lines["direct"][3]["session"] == "cc1"
    assert lines["direct"][2]["completion_tokens"] == 5


async def test_draining_answers_new_calls_503_with_retry_after() -> None:
    async with running(FakeState()) as svc:
        svc.app.draining = True
        response = await svc.chat()
        svc.app.draining = False
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1"
        assert response.headers["connection"] == "close"
        assert response.json()["error"]["code"] == "draining"
        assert svc.app.direct_calls == 1
        assert (await svc.chat()).status_code == 200


async def test_a_client_leaving_a_stream_aborts_the_backend_call_and_settles_it() -> None:
    state = FakeState(tokens=200, chunk_delay_s=0.02)
    async with running(state) as svc:
        async with svc.http.stream("POST", svc.url + CHAT, json=chat_body(stream=True)) as r:
            seen = 0
            async for _ in r.aiter_lines():
                seen += 1
                if seen >= 3:
                    break
        for _ in range(500):
            if state.aborted and all(s.in_flight == 0 for s in svc.app.core.pool.states.values()):
                break
            await anyio.sleep(0.02)
        metrics = (await svc.http.get(svc.url + "/metrics")).text
        assert state.aborted == 1
        assert all(s.in_flight == 0 for s in svc.app.core.pool.states.values())
        assert "agentrt_controller_client_disconnects_total 1" in metrics
        assert svc.app.direct_calls == 1
        assert (await svc.chat()).status_code == 200  # the controller serves on


async def test_a_client_leaving_a_queued_call_removes_it() -> None:
    state = FakeState(gate=anyio.Event())
    async with running(state, admission_window=1) as svc, anyio.create_task_group() as group:
        group.start_soon(svc.chat)
        while state.active < 1:  # noqa: ASYNC110
            await anyio.sleep(0.01)
        with anyio.CancelScope() as impatient:

            async def leave_when_queued() -> None:
                while svc.app.core.calls.queued() < 1:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
                impatient.cancel()

            group.start_soon(leave_when_queued)
            async with httpx.AsyncClient() as client:
                await client.post(svc.url + CHAT, json=chat_body())
        for _ in range(500):
            if svc.app.core.calls.queued() == 0:
                break
            await anyio.sleep(0.02)
        assert svc.app.core.calls.queued() == 0
        state.gate.set()  # type: ignore[union-attr]
    assert svc.app.direct_calls == 2


async def test_a_crash_is_an_openai_shaped_500_logged_once_and_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with running(FakeState()) as svc:

        def boom(*args: object, **kwargs: object) -> Any:
            raise RuntimeError("boom: secret prompt text")

        monkeypatch.setattr(svc.app.core, "accept", boom)
        caplog.clear()
        response = await svc.chat()
        metrics = (await svc.http.get(svc.url + "/metrics")).text
        assert response.status_code == 500
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        assert "boom" not in response.text
        route = 'agentrt_controller_http_internal_errors_total{route="/v1/chat/completions"} 1'
        assert route in metrics
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "RuntimeError" in errors[0].getMessage()
        assert svc.app.direct_calls == 1


async def test_the_client_trace_is_joined_on_the_fast_path() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    state = FakeState()
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    apps: list[ControllerApp] = []
    async with fake_backends(state) as urls:
        config = ControllerConfig(port=0, backends=(BackendSpec(urls[0]),))
        async with (
            serve_controller(config, tracer_provider=provider, on_app=apps.append) as url,
            httpx.AsyncClient() as http,
        ):
            headers = {"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"}
            response = await http.post(url + CHAT, json=chat_body(stream=True), headers=headers)
    assert response.status_code == 200
    assert apps[0].direct_calls == 1
    (span,) = exporter.get_finished_spans()
    assert format(span.context.trace_id, "032x") == trace_id
    assert state.headers[0]["traceparent"].startswith(f"00-{trace_id}-")


@pytest.mark.parametrize("path", PATHS)
async def test_a_body_too_slow_is_a_408_on_both_paths(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    def quick(cls: type[HttpLimits], config: Any) -> HttpLimits:
        return cls(max_body_bytes=config.max_body_bytes, body_timeout_s=0.3)

    monkeypatch.setattr(HttpLimits, "from_config", classmethod(quick))
    async with running(FakeState(), http_path=path) as svc:
        partial = _request(CHAT, GOOD)[:-5]  # the body's last bytes never come
        (answer,) = _answers(await _exchange(svc.url, partial))
        assert answer[0] == 408 and answer[1]["connection"] == "close"
        assert "not received within 0.3 s" in json.loads(answer[2])["error"]["message"]
        assert svc.app.direct_calls == (1 if path == "direct" else 0)


#: A stream as a fast engine's answer may reach the controller: every event in one read.
_WHOLE_STREAM = (
    b"".join(
        b"data: " + json.dumps(chunk).encode() + b"\n\n"
        for chunk in (
            *({"choices": [{"index": 0, "delta": {"content": c}}], "usage": None} for c in "abc"),
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}},
        )
    )
    + b"data: [DONE]\n\n"
)


async def _whole_stream_backend(reader: Any, writer: Any) -> None:
    """Answers a chat call with :data:`_WHOLE_STREAM` in one write; anything else ``{}``."""
    with contextlib.suppress(ConnectionError, anyio.IncompleteRead, EOFError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"(?i)content-length:\s*(\d+)", head)
            await reader.readexactly(int(match.group(1)) if match else 0)
            if head.startswith(b"POST"):
                chunked = b"%x\r\n%b\r\n0\r\n\r\n" % (len(_WHOLE_STREAM), _WHOLE_STREAM)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                    b"transfer-encoding: chunked\r\n\r\n" + chunked
                )
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
    writer.close()


@pytest.mark.parametrize("http_path", PATHS)
async def test_a_stream_that_arrived_whole_goes_on_intact_and_is_charged(http_path: str) -> None:
    # The last piece of a stream is written with the stream's end (here all of it): one HTTP
    # chunk before the terminating one, the events as the backend framed them, usage charged.

    listener = await asyncio.start_server(_whole_stream_backend, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    body = json.dumps(chat_body(True, stream_options={"include_usage": True})).encode()
    try:
        async with controller([f"http://127.0.0.1:{port}"], http_path=http_path) as (url, _):
            raw = await _exchange(url, _request(CHAT, body, close=True))
            async with httpx.AsyncClient(timeout=10) as http:
                metrics = (await http.get(url + "/metrics")).text
    finally:
        listener.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert rest == b"%x\r\n%b\r\n0\r\n\r\n" % (len(_WHOLE_STREAM), _WHOLE_STREAM)
    assert re.search(r"(?m)^agentrt_controller_output_tokens_total(\{[^}]*\})? 3(\.0)?$", metrics)


EVENTS = "/agentrt/v1/programs/"
ADMIN = "admin-token-9"


def _event(target: str, body: object, authorization: str | None = f"Bearer {KEY}") -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    extra = b"" if authorization is None else f"authorization: {authorization}\r\n".encode()
    return _request(EVENTS + target, raw, extra, close=True)


async def test_program_events_take_the_fast_path_and_answer_alike(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    wait = {"session_id": "s1", "thread_id": "t1", "node_id": "n1", "tool_name": "search"}
    over_event = {"session_id": "s1", "name": "a" * (64 * 1024)}  # the events' own 64 KiB
    requests = [
        _event("p1/start", {"session_id": "s1", "name": "react"}),
        _event("p1/tool-start", wait),
        _event("p1/tool-end", {**wait, "duration_s": 0.1}),
        _event("a*b/start", {"session_id": "s1"}),  # a bad id
        _event("/start", {"session_id": "s1"}),  # an empty id
        _event("p1/tool-start", {"session_id": 5}),  # a bad body
        _event("p1/start", b"{"),  # not JSON
        _event("p1/start", b'{"a":' + b"[" * 200 + b"]" * 200 + b"}"),  # the guard's 400
        _event("p1/pause", {"session_id": "s1"}),  # an unknown event
        _event("p1/start", {"session_id": "s1"}, None),  # no key
        _event("p1/start", {"session_id": "s1"}, "Bearer nope"),  # a wrong key
        _event("p1/start", {"session_id": "s1"}, f"Bearer {ADMIN}"),  # the admin token
        _event("p1/start", over_event),  # 413: the event's limit
        _event("p1/start", b"").replace(b"content-length: 0", b"content-length: 300000"),
        _event("a%2Fb/start", {"session_id": "s1"}),  # an escaped id: the ASGI way
        _event("p1/end", {"session_id": "s1"}),
    ]
    answers: dict[str, list[Any]] = {}
    lines: dict[str, list[dict[str, Any]]] = {}
    for path in PATHS:
        options = {"api_key": KEY, "admin_token": ADMIN, "max_body_bytes": 256 * 1024}
        async with running(FakeState(), access_log="json", http_path=path, **options) as svc:
            caplog.clear()
            answers[path] = []
            for request in requests:
                if request is requests[-1]:
                    svc.app.draining = True  # program events pass while draining
                (answer,) = _answers(await _exchange(svc.url, request))
                answers[path].append(_comparable(answer))
            svc.app.draining = False
            assert svc.app.direct_calls == (len(requests) - 1 if path == "direct" else 0)
            table = (
                await svc.http.get(
                    svc.url + "/agentrt/v1/programs", headers={"Authorization": f"Bearer {KEY}"}
                )
            ).json()
            assert [e["program_id"] for e in table["entries"]] == ["a/b"]
            lines[path] = [
                {
                    k: v
                    for k, v in json.loads(r.getMessage()).items()
                    if k not in ("time", "latency_ms")
                }
                for r in caplog.records
                if r.name == ACCESS_LOGGER and EVENTS in r.getMessage()
            ]
    assert answers["direct"] == answers["asgi"]
    statuses = [status for status, _, _ in answers["direct"]]
    assert statuses == [
        200,
        200,
        200,
        400,
        400,
        400,
        400,
        400,
        404,
        401,
        401,
        401,
        413,
        413,
        200,
        200,
    ]
    assert answers["direct"][0][2] == {"ok": True, "program_id": "p1", "event": "start"}
    assert answers["direct"][0][1]["content-type"] == "application/json"
    assert answers["direct"][-2][2] == {"ok": True, "program_id": "a/b", "event": "start"}
    assert "event body over 65536 bytes" in answers["direct"][12][2]["error"]["message"]
    assert "request body over 262144 bytes" in answers["direct"][13][2]["error"]["message"]
    assert lines["direct"] == lines["asgi"]
    assert len(lines["direct"]) == len(requests)
    first = lines["direct"][0]
    assert (first["method"], first["path"], first["status"]) == ("POST", EVENTS + "p1/start", 200)
    assert (first["tenant"], first["session"], first["program"]) == ("default", "s1", "p1")
    assert [line["tenant"] for line in lines["direct"][9:12]] == [None, None, None]


@pytest.mark.parametrize("path", PATHS)
async def test_a_crash_in_a_program_event_is_a_500_counted_by_route(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    async with running(FakeState(), http_path=path) as svc:

        def boom(*args: object, **kwargs: object) -> Any:
            raise RuntimeError("boom")

        monkeypatch.setattr(svc.app.core, "start_program", boom)
        response = await svc.http.post(svc.url + EVENTS + "p1/start", json={"session_id": "s1"})
        metrics = (await svc.http.get(svc.url + "/metrics")).text
        assert response.status_code == 500
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        route = '{route="/agentrt/v1/programs/{program_id:path}/{event}"} 1'
        assert "agentrt_controller_http_internal_errors_total" + route in metrics
        assert svc.app.direct_calls == (1 if path == "direct" else 0)
