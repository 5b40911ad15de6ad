"""Server limits over real sockets, on both servers: head size, head timeout (slow loris),
body size while reading (413), connection limit (503), and the catch-all 500."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from agentrt_controller.service import ControllerConfig
from agentrt_emulator.server import EmulatorConfig

from .stack import MODEL, Stack, threaded_stack

_LIMITS: dict[str, Any] = {"max_body_bytes": 64 * 1024, "header_timeout_s": 1.0,
                           "max_concurrency": 16}  # fmt: skip


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with threaded_stack(dict(_LIMITS), **_LIMITS) as running:
        yield running


def _bases(stack: Stack) -> list[str]:
    return [stack.controller_url, stack.engine_url]


def _connect(base: str) -> socket.socket:
    parts = urlsplit(base)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    return sock


def _read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes (or ``limit_s`` passes); and when."""
    start = time.monotonic()
    sock.settimeout(0.1)
    data = b""
    while time.monotonic() - start < limit_s:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data, time.monotonic() - start


def _status(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0


def test_both_servers_default_to_the_same_limits() -> None:
    controller, engine = ControllerConfig(), EmulatorConfig()
    for name in ("max_body_bytes", "max_header_bytes", "header_timeout_s", "max_concurrency"):
        assert getattr(controller, name) == getattr(engine, name), name
    assert controller.max_body_bytes == 16 * 1024 * 1024
    assert controller.max_header_bytes == 64 * 1024


@pytest.mark.parametrize("server", [0, 1], ids=["controller", "engine"])
def test_an_oversized_head_is_refused_and_a_large_one_is_not(stack: Stack, server: int) -> None:
    base = _bases(stack)[server]
    big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
    with _connect(base) as sock:
        sock.sendall(big)
        raw, _ = _read_until_closed(sock, 5)
    # 431 from the middleware; uvicorn answers a head h11 finds too large with 400.
    assert _status(raw) in (400, 431) or raw == b""
    ok = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
    with _connect(base) as sock:
        sock.sendall(ok + b"a" * 60_000 + b"\r\n\r\n")
        raw, _ = _read_until_closed(sock, 5)
    assert _status(raw) == 200


@pytest.mark.parametrize("server", [0, 1], ids=["controller", "engine"])
def test_a_slow_head_is_dropped_within_the_timeout(stack: Stack, server: int) -> None:
    base = _bases(stack)[server]
    with _connect(base) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        start = time.monotonic()
        closed_after = None
        for _ in range(40):  # one header byte every 0.1 s: a head that never completes
            try:
                sock.sendall(b"X")
            except OSError:
                closed_after = time.monotonic() - start
                break
            _, took = _read_until_closed(sock, 0.1)
            if took < 0.09:  # recv returned: the server closed the connection
                closed_after = time.monotonic() - start
                break
        assert closed_after is not None, "a trickled head kept its connection for 4 s"
        assert closed_after < _LIMITS["header_timeout_s"] + 1.0
    with _connect(base) as sock:  # a connection that sends nothing at all
        _, took = _read_until_closed(sock, 4)
    assert took < _LIMITS["header_timeout_s"] + 1.0


@pytest.mark.parametrize("server", [0, 1], ids=["controller", "engine"])
def test_a_declared_body_over_the_limit_is_a_413_before_it_is_sent(
    stack: Stack, server: int
) -> None:
    base = _bases(stack)[server]
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % (_LIMITS["max_body_bytes"] + 1)
    )
    with _connect(base) as sock:
        sock.sendall(head)  # and no body
        raw, took = _read_until_closed(sock, 5)
    assert _status(raw) == 413
    assert took < 5
    assert b'"error"' in raw


@pytest.mark.parametrize("server", [0, 1], ids=["controller", "engine"])
def test_a_streamed_body_over_the_limit_is_a_413_while_it_is_sent(
    stack: Stack, server: int
) -> None:
    base = _bases(stack)[server]
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"2000\r\n" + b"a" * 0x2000 + b"\r\n"  # 8 KiB, no Content-Length
    sent = 0
    answer = b""
    with _connect(base) as sock:
        sock.sendall(head)
        while sent < 16 * _LIMITS["max_body_bytes"] and not answer:
            try:
                sock.sendall(chunk)
            except OSError:
                break  # closed after answering
            sent += 0x2000
            answer, _ = _read_until_closed(sock, 0.01) if sent % 0x8000 == 0 else (b"", 0.0)
        more, _ = _read_until_closed(sock, 2)
    assert _status(answer + more) == 413
    assert sent <= 4 * _LIMITS["max_body_bytes"]  # answered while the body was still coming


@pytest.mark.parametrize("server", [0, 1], ids=["controller", "engine"])
def test_a_body_at_the_limit_is_read(stack: Stack, server: int) -> None:
    base = _bases(stack)[server]
    filler = _LIMITS["max_body_bytes"] - 200
    body = b'{"model":"%s","messages":[{"role":"user","content":"%s"}],"max_tokens":1}' % (
        MODEL.encode(),
        b"a " * (filler // 2),
    )
    assert len(body) <= _LIMITS["max_body_bytes"]
    with httpx.Client(timeout=10) as http:
        response = http.post(base + "/v1/chat/completions", content=body)
    assert response.status_code == 200, response.text


def _still_open(sock: socket.socket) -> bool:
    """The server has neither closed ``sock`` nor written to it (a connection that sent
    nothing gets nothing but, after the head timeout, its close)."""
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)  # returns: a close (b"") or something written
    except BlockingIOError:
        return True
    except OSError:
        pass
    return False


@pytest.mark.parametrize("server", [0, 1], ids=["controller", "engine"])
def test_connections_past_the_limit_get_503(stack: Stack, server: int) -> None:
    base = _bases(stack)[server]
    # The held connections send nothing, so the head timeout drops them after
    # header_timeout_s: a call is past the limit only while all of them are still open. A
    # host that stalls this test past the timeout voids an attempt (checked after the answer:
    # a connection open then was open during the call); a 200 while all were held fails.
    for _attempt in range(5):
        held = [_connect(base) for _ in range(_LIMITS["max_concurrency"])]
        try:
            time.sleep(0.2)  # let the server accept them all
            with httpx.Client(timeout=10) as http:
                response = http.get(base + "/health")
            all_held = all(_still_open(sock) for sock in held)
        finally:
            for sock in held:
                sock.close()
        if all_held:
            break
    assert all_held, "the held connections were dropped before every attempt's call"
    assert response.status_code == 503
    # Once they are closed, calls are served again (polled: the server sees the closes when
    # its loop next runs).
    with httpx.Client(timeout=10) as http:
        deadline = time.monotonic() + 10
        while (status := http.get(base + "/health").status_code) != 200:
            assert time.monotonic() < deadline, status
            time.sleep(0.05)


def _boom(*args: object, **kwargs: object) -> Any:
    raise RuntimeError("boom: secret prompt text")


def _crash_and_check(
    stack: Stack, url: str, call: Callable[[httpx.Client], httpx.Response], metric: str
) -> None:
    stack.logs.clear()
    with httpx.Client(timeout=10) as http:
        response = call(http)
        assert response.status_code == 500
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert "Traceback" not in response.text and "boom" not in response.text
        metrics = http.get(url + "/metrics").text
    assert metric in metrics, metrics[-2000:]
    errors = [r for r in stack.logs.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]  # once, not again by uvicorn
    assert "RuntimeError" in errors[0].getMessage()
    assert "hello-body" not in errors[0].getMessage()


def test_a_controller_crash_is_an_openai_shaped_500_logged_once_and_counted(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stack.controller.core, "models", _boom)
    _crash_and_check(
        stack,
        stack.controller_url,
        lambda http: http.get(stack.controller_url + "/v1/models"),
        'agentrt_controller_http_internal_errors_total{route="/v1/models"} 1',
    )
    body = next(iter(stack.logs.tracebacks()))
    assert "hello-body" not in body


def test_an_emulator_crash_is_a_500_logged_once_and_counted(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stack.engine.state.tokenizer, "encode", _boom)
    _crash_and_check(
        stack,
        stack.engine_url,
        lambda http: http.post(stack.engine_url + "/tokenize", json={"prompt": "hello-body"}),
        f'agentrt_engine_internal_errors_total{{model_name="{MODEL}",route="/tokenize"}} 1',
    )
