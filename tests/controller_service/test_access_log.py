"""The access log (one line per request, text or JSON) and wall-clock times in introspection,
over real HTTP: a controller on loopback in front of a fake OpenAI server."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import logging
import re
import signal
import time

import anyio
import httpx
import pytest
from anyio.abc import ByteReceiveStream

from agentrt.protocol import CallTags
from agentrt_controller.service.http import access_log
from agentrt_emulator.server import EmulatorConfig, serve_engine
from agentrt_serving.logs import ACCESS_LOGGER, IsoFormatter, iso_time, server_log_config
from tests.ops.processes import AGENTRT, free_port, reap

from .conftest import controller, fake_backends, running
from .fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

_CALLS = 12
_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
_FIELDS = ["time", "method", "path", "status", "latency_ms", "tenant", "session", "program",
           "model", "backend", "prompt_tokens", "completion_tokens"]  # fmt: skip


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == ACCESS_LOGGER]


def _parse_iso(text: str) -> float:
    assert _ISO.match(text), text
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


async def test_json_access_log_has_one_line_per_request_with_what_the_core_decided(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    tags = CallTags(session_id="s1", program_id="p1", thread_id="t1", node_id="n1")
    before = time.time()
    async with running(FakeState(tokens=7), access_log="json") as svc:
        started = await svc.http.post(
            svc.url + "/agentrt/v1/programs/p1/start", json={"session_id": "s1"}
        )
        assert started.status_code == 200
        whole = await svc.chat(headers=tags.to_headers())
        streamed = await svc.chat(headers=tags.to_headers(), stream=True)
        missing = await svc.http.get(svc.url + "/no/such/path")
        unknown_model = await svc.chat(model="nope")
        backend_id = svc.app.config.backends[0].backend_id
    assert [whole.status_code, streamed.status_code] == [200, 200]
    records = [json.loads(line) for line in _access_lines(caplog)]
    assert len(records) == 5, records
    for record in records:
        assert list(record) == _FIELDS
        assert before - 1 <= _parse_iso(record["time"]) <= time.time() + 1
        assert record["latency_ms"] >= 0
    event, call, stream_call, not_found, bad_model = records
    assert (event["path"], event["status"]) == ("/agentrt/v1/programs/p1/start", 200)
    assert (event["session"], event["program"], event["tenant"]) == ("s1", "p1", "default")
    assert call == {
        **call,
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "tenant": "default",
        "session": "s1",
        "program": "p1",
        "model": "tiny",
        "backend": backend_id,
        "completion_tokens": 7,
    }
    assert isinstance(call["prompt_tokens"], int) and call["prompt_tokens"] > 0
    assert stream_call["status"] == 200 and stream_call["completion_tokens"] == 7
    assert stream_call["backend"] == backend_id
    assert not_found["status"] == missing.status_code == 404
    assert not_found["backend"] is None and not_found["model"] is None
    assert bad_model["status"] == unknown_model.status_code == 404
    assert bad_model["backend"] is None and bad_model["prompt_tokens"] is None


async def test_text_access_log_is_one_key_value_line_and_quotes_odd_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    tags = CallTags(session_id="s=1", program_id="p1", thread_id="t1", node_id="n1")
    async with running(FakeState(), access_log="text") as svc:
        assert (await svc.chat(headers=tags.to_headers())).status_code == 200
        backend_id = svc.app.config.backends[0].backend_id
    (line,) = _access_lines(caplog)
    assert "\n" not in line
    time_text, method, path, status, latency, *pairs = line.split(" ")
    _parse_iso(time_text)
    assert (method, path, status) == ("POST", "/v1/chat/completions", "200")
    assert latency.endswith("ms") and float(latency[:-2]) >= 0
    fields = dict(pair.split("=", 1) for pair in pairs)
    assert fields["tenant"] == "default" and fields["program"] == "p1"
    assert fields["session"] == '"s=1"'  # a value with "=" is JSON-quoted: no forged field
    assert fields["backend"] == backend_id and fields["completion_tokens"] == "5"


async def test_lines_held_for_one_write_are_all_written_when_the_server_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's logging (one stream handler of the bare line): the lines are held for one
    write; a controller that stops writes what it holds, though the write's timer is not due
    (here an hour away)."""
    monkeypatch.setattr(access_log, "FLUSH_AFTER_S", 3600.0)
    logger = logging.getLogger(ACCESS_LOGGER)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(logger, "level", logging.INFO)
    for http_path in ("direct", "asgi"):
        stream.seek(0)
        stream.truncate()
        async with running(FakeState(), access_log="text", http_path=http_path) as svc:
            for _ in range(_CALLS):
                assert (await svc.chat()).status_code == 200
            assert (await svc.http.get(svc.url + "/health")).status_code == 200
            assert stream.getvalue() == ""  # held: the timer is an hour away
        lines = stream.getvalue().splitlines()
        chat = [line for line in lines if " POST /v1/chat/completions 200 " in line]
        assert len(chat) == _CALLS, (http_path, lines)
        assert any(" GET /health 200 " in line for line in lines)


async def test_access_log_off_writes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    async with running(FakeState(), access_log="off") as svc:
        assert (await svc.chat()).status_code == 200
    assert _access_lines(caplog) == []


async def test_introspection_gives_moments_as_iso_wall_times_and_names_monotonic_ones() -> None:
    tags = CallTags(session_id="s1", program_id="p1", thread_id="t1", node_id="n1")
    async with running(FakeState()) as svc:
        start = {"session_id": "s1", "timeout_ms": 60_000}
        await svc.http.post(svc.url + "/agentrt/v1/programs/p1/start", json=start)
        before = time.time()
        assert (await svc.chat(headers=tags.to_headers())).status_code == 200
        programs = (await svc.http.get(svc.url + "/agentrt/v1/programs")).json()
        queues = (await svc.http.get(svc.url + "/agentrt/v1/queues")).json()
    (entry,) = programs["entries"]
    for name in ("last_arrival", "last_completion"):
        assert before - 1 <= _parse_iso(entry[f"{name}_at"]) <= time.time() + 1
        assert isinstance(entry[f"{name}_monotonic_s"], float)
        assert f"{name}_s" not in entry
    # The deadline is ~60 s after the program started.
    assert 50 <= _parse_iso(entry["deadline_at"]) - before <= 70
    gap_s = entry["deadline_monotonic_s"] - entry["last_arrival_monotonic_s"]
    wall_gap_s = _parse_iso(entry["deadline_at"]) - _parse_iso(entry["last_arrival_at"])
    assert abs(gap_s - wall_gap_s) < 0.01
    assert entry["retained_until_at"] is None and entry["retained_until_monotonic_s"] is None
    for view in (programs, queues):
        assert before - 1 <= _parse_iso(view["now_at"]) <= time.time() + 1
        assert isinstance(view["now_monotonic_s"], float)


async def test_introspection_wall_times_follow_a_scaled_clock() -> None:
    """At ``--time-scale 10`` the controller's seconds are model seconds: a client's 60 s
    budget is 600 of them (the core's deadline, ``deadline_monotonic_s``), and shows as 60 wall
    seconds ahead again; a moment just past is just past on the wall too."""
    tags = CallTags(session_id="s1", program_id="p1", thread_id="t1", node_id="n1")
    async with running(FakeState(), time_scale=10.0) as svc:
        start = {"session_id": "s1", "timeout_ms": 60_000}
        before = time.time()
        await svc.http.post(svc.url + "/agentrt/v1/programs/p1/start", json=start)
        assert (await svc.chat(headers=tags.to_headers())).status_code == 200
        (entry,) = (await svc.http.get(svc.url + "/agentrt/v1/programs")).json()["entries"]
        after = time.time()
    assert before - 0.5 <= _parse_iso(entry["last_arrival_at"]) <= after + 0.5
    assert 59.0 <= _parse_iso(entry["deadline_at"]) - before <= 60.0 + (after - before) + 0.5
    assert 599.0 <= entry["deadline_monotonic_s"] - entry["last_arrival_monotonic_s"] <= 600.0
    gap_s = entry["deadline_monotonic_s"] - entry["last_arrival_monotonic_s"]
    wall_gap_s = _parse_iso(entry["deadline_at"]) - _parse_iso(entry["last_arrival_at"])
    assert abs(gap_s / 10.0 - wall_gap_s) < 0.01


def test_process_log_lines_start_with_their_iso_time() -> None:
    formatter = IsoFormatter()
    record = logging.LogRecord("agentrt.controller", logging.WARNING, __file__, 1,
                               "backend %s is up", ("b0",), None)  # fmt: skip
    line = formatter.format(record)
    assert line == f"{iso_time(record.created)} WARNING agentrt.controller: backend b0 is up"
    config = server_log_config("info", access_log=True)
    assert config["root"]["level"] == logging.INFO
    assert config["loggers"][ACCESS_LOGGER]["handlers"] == ["access"]
    assert server_log_config("error")["loggers"][ACCESS_LOGGER]["handlers"] == []


async def test_the_served_process_times_every_stderr_line_and_logs_requests_on_stdout() -> None:
    """``agentrt controller serve --access-log json --log-level info`` in front of an
    emulator: JSON access lines on stdout, every stderr line timed, reasons in state changes;
    the lines of calls answered just before SIGTERM are all there (the stream's flush waits
    up to FLUSH_AFTER_S; the server's exit flushes it)."""
    async with serve_engine(EmulatorConfig(time_scale=50)) as engine:
        port = free_port()
        command = [*AGENTRT, "controller", "serve", "--port", str(port), "--log-level", "info",
                   "--access-log", "json", "--scrape-interval-s", "0.2",
                   "--backend", f"{engine.base_url},kind=emulator,id=emu"]  # fmt: skip
        out, err = bytearray(), bytearray()
        process = await anyio.open_process(command)
        url = f"http://127.0.0.1:{port}"

        async def drain(stream: ByteReceiveStream | None, into: bytearray) -> None:
            assert stream is not None
            async for chunk in stream:
                into.extend(chunk)

        try:
            async with anyio.create_task_group() as group, httpx.AsyncClient() as http:
                group.start_soon(drain, process.stdout, out)
                group.start_soon(drain, process.stderr, err)
                with anyio.fail_after(20):
                    while True:
                        with contextlib.suppress(httpx.TransportError):
                            if (await http.get(url + "/readyz")).status_code == 200:
                                break
                        await anyio.sleep(0.05)
                model = engine.state.config.model_name
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 4}  # fmt: skip
                for _ in range(_CALLS):
                    answer = await http.post(url + "/v1/chat/completions", json=body)
                    assert answer.status_code == 200, answer.text
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(20):
                    assert await process.wait() == 0
        finally:
            await reap(process)
    records = [json.loads(line) for line in out.decode().splitlines()]
    calls = [r for r in records if r["path"] == "/v1/chat/completions"]
    assert len(calls) == _CALLS
    call = calls[-1]
    assert call["status"] == 200 and call["backend"] == "emu" and call["model"] == model
    assert call["completion_tokens"] == 4 and call["tenant"] == "default"
    assert any(r["path"] == "/readyz" and r["tenant"] is None for r in records)
    lines = err.decode().splitlines()
    assert lines and all(_ISO.match(line.split(" ", 1)[0]) for line in lines), lines
    assert any("draining: SIGTERM received" in line for line in lines), lines
    assert any("agentrt controller on" in line for line in lines), lines


async def _logged(text: str, caplog: pytest.LogCaptureFixture) -> None:
    """Return once the ``agentrt.controller`` logger wrote (or had written) a line containing
    ``text`` (the pool logs from the event loop's thread, where the event is set)."""
    seen = anyio.Event()
    if any(text in record.getMessage() for record in caplog.records):
        return

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if text in record.getMessage():
                seen.set()

    watch = Watch()
    logger = logging.getLogger("agentrt.controller")
    logger.addHandler(watch)
    try:
        await seen.wait()
    finally:
        logger.removeHandler(watch)


async def test_backend_state_changes_say_why(caplog: pytest.LogCaptureFixture) -> None:
    """Going out, being removed and being dropped: each line names its reason (no empty
    ``(draining: )``)."""
    caplog.set_level(logging.INFO, logger="agentrt.controller")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: its probes fail
    async with (
        fake_backends(FakeState(), FakeState()) as urls,
        controller([*urls, dead], scrape_interval_s=0.1) as (url, app),
        httpx.AsyncClient() as http,
    ):
        dead_id, removed_id = app.config.backends[2].backend_id, app.config.backends[1].backend_id
        with anyio.fail_after(10):
            await _logged(f"backend {dead_id} is out", caplog)
        answer = await http.delete(url + f"/agentrt/v1/backends/{removed_id}")
        assert answer.status_code in (200, 202)
    lines = [r.getMessage() for r in caplog.records if r.name == "agentrt.controller"]
    out = next(line for line in lines if f"backend {dead_id} is out" in line)
    assert re.search(r"is out \(\w+: \S.*\)$", out), out
    assert any(f"backend {removed_id} removed through the admin API" in line for line in lines)
    assert any(f"backend {removed_id} dropped: removed" in line for line in lines), lines
    assert not any(": )" in line for line in lines), lines


async def test_a_client_that_leaves_before_its_event_body_is_a_499_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An SDK that gives up on a tool-start event mid-body (its own timeout) closes the
    # connection: the controller logs the request as 499 and no error.
    caplog.set_level(logging.INFO)
    async with running(FakeState(), access_log="text") as svc:
        host, port = svc.url.removeprefix("http://").split(":")
        path = "/agentrt/v1/programs/p1/tool-start"
        head = (f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
                "content-length: 1000\r\n\r\n")  # fmt: skip
        async with await anyio.connect_tcp(host, int(port)) as stream:
            await stream.send(head.encode() + b'{"session_id": ')
        with anyio.fail_after(10):
            while not any(" 499 " in line for line in _access_lines(caplog)):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert (await svc.chat()).status_code == 200  # the controller carries on
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert not any(r.exc_info for r in caplog.records)
