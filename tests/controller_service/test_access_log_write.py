"""The access log's line is written straight to its stream when the logger's configuration
comes down to that (the CLI's: one ``StreamHandler`` of ``%(message)s``), and through
``logging`` otherwise — the same bytes either way, and a user's handlers, filters and levels
still see every line (docs/controller.md, "Performance notes")."""

from __future__ import annotations

import asyncio
import io
import logging
import logging.config
from collections.abc import Iterator
from typing import Any, cast

import pytest

from agentrt_controller.service.http.access_log import (
    FLUSH_AFTER_S,
    FLUSH_CHARS,
    AccessFacts,
    AccessLog,
)
from agentrt_serving.logs import iso_time, server_log_config

pytestmark = pytest.mark.timeout(30)

_FACTS = AccessFacts(
    session="s1", program="p 1", model="m", backend="b0", prompt_tokens=12, completion_tokens=3
)


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("agentrt.access.test")
    root = logging.getLogger()
    saved = logger.handlers[:], logger.filters[:], logger.propagate, logger.level
    saved_root = root.handlers[:], root.level
    yield logger
    logger.handlers[:], logger.filters[:] = saved[0], saved[1]
    logger.propagate, logger.level = saved[2], saved[3]
    root.handlers[:], root.level = saved_root  # dictConfig replaced the root's


def _log(logger: logging.Logger, form: str) -> AccessLog:
    return AccessLog(cast(Any, None), cast(Any, form), logger=logger, wall_clock=lambda: 1e9)


def _plain(logger: logging.Logger) -> tuple[io.StringIO, logging.StreamHandler[Any]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return stream, handler


@pytest.mark.parametrize("form", ["text", "json"])
def test_the_direct_write_and_logging_s_write_the_same_bytes(
    logger: logging.Logger, form: str
) -> None:
    stream, handler = _plain(logger)
    log = _log(logger, form)
    log.write("POST", "/v1/chat/completions", "t", 200, 41.7, _FACTS)
    assert log._plain_handler() is handler  # written straight to the stream
    direct = stream.getvalue()

    stream.seek(0)
    stream.truncate()
    handler.addFilter(lambda record: True)  # a filter: the line goes through logging
    assert log._plain_handler() is None
    log.write("POST", "/v1/chat/completions", "t", 200, 41.7, _FACTS)
    assert stream.getvalue() == direct
    assert direct.endswith("\n") and direct.count("\n") == 1
    assert "2001-09-09T01:46:40.000Z" in direct and "b0" in direct


def test_the_cli_s_configuration_is_written_straight_and_other_ones_through_logging(
    logger: logging.Logger,
) -> None:
    config = server_log_config("warning", access_log=True)
    config["loggers"] = {logger.name: config["loggers"]["agentrt.access"]}
    logging.config.dictConfig(config)
    log = _log(logger, "text")
    assert log._plain_handler() is logger.handlers[0]

    seen: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger.addHandler(Collect())  # a second handler (a user's): every line is a record
    assert log._plain_handler() is None
    log.write("GET", "/health", None, 200, 0.5, AccessFacts())
    assert [r.getMessage() for r in seen] == [log._line("GET", "/health", None, 200, 0.5,
                                                       AccessFacts())]  # fmt: skip
    assert seen[0].levelno == logging.INFO and seen[0].name == logger.name


def test_a_custom_formatter_or_handler_class_gets_records(logger: logging.Logger) -> None:
    _stream, handler = _plain(logger)
    log = _log(logger, "text")
    handler.setFormatter(logging.Formatter("access: %(message)s"))
    assert log._plain_handler() is None
    handler.setFormatter(logging.Formatter("%(message)s"))
    assert log._plain_handler() is handler
    handler.setLevel(logging.WARNING)  # the handler no longer takes INFO: logging decides
    assert log._plain_handler() is None
    handler.setLevel(logging.NOTSET)
    logger.propagate = True
    assert log._plain_handler() is None


class _CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.flushes: list[str] = []  # what the stream held at each flush

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)

    def flush(self) -> None:
        self.flushes.append(self.getvalue())
        super().flush()


@pytest.mark.anyio
async def test_lines_of_several_loop_turns_leave_in_one_write_at_most_flush_after_s_later(
    logger: logging.Logger,
) -> None:
    _stream, handler = _plain(logger)
    stream = _CountingStream()
    handler.setStream(stream)
    log = _log(logger, "text")
    loop = asyncio.get_running_loop()
    first_at = loop.time()
    for index in range(3):
        log.write("POST", f"/v1/completions/{index}", "t", 200, 1.0, AccessFacts())
        await asyncio.sleep(0)  # another turn of the loop: still held
    assert stream.getvalue() == "" and stream.writes == 0
    await asyncio.sleep(FLUSH_AFTER_S)  # the write's timer, due earlier, fires first
    assert loop.time() - first_at >= FLUSH_AFTER_S
    assert stream.getvalue().count("\n") == 3 and stream.writes == 1
    assert stream.flushes == [stream.getvalue()]
    log.write("GET", "/health", None, 200, 1.0, AccessFacts())
    log.flush()  # the server's exit: at once, and the timer cancelled
    assert stream.writes == 2 and stream.flushes[-1].count("\n") == 4
    await asyncio.sleep(FLUSH_AFTER_S * 1.5)
    assert stream.writes == 2  # nothing more was held


@pytest.mark.anyio
async def test_held_lines_past_flush_chars_are_written_at_once(logger: logging.Logger) -> None:
    _stream, handler = _plain(logger)
    stream = _CountingStream()
    handler.setStream(stream)
    log = _log(logger, "text")
    line = log._line("POST", "/v1/chat/completions", "t", 200, 1.0, _FACTS)
    lines = FLUSH_CHARS // len(line) + 1
    for _ in range(lines):
        log.write("POST", "/v1/chat/completions", "t", 200, 1.0, _FACTS)
    assert stream.writes == 1 and stream.getvalue() == (line + "\n") * lines
    log.flush()
    assert stream.writes == 1  # nothing held


@pytest.mark.anyio
async def test_held_lines_go_before_a_line_that_takes_logging_s_way(
    logger: logging.Logger,
) -> None:
    stream, handler = _plain(logger)
    log = _log(logger, "text")
    log.write("GET", "/first", None, 200, 1.0, AccessFacts())
    assert stream.getvalue() == ""
    handler.addFilter(lambda record: True)  # now through logging, at once
    log.write("GET", "/second", None, 200, 1.0, AccessFacts())
    assert [line.split()[2] for line in stream.getvalue().splitlines()] == ["/first", "/second"]


def test_a_line_written_outside_an_event_loop_is_flushed_at_once(logger: logging.Logger) -> None:
    _stream, handler = _plain(logger)
    stream = _CountingStream()
    handler.setStream(stream)
    _log(logger, "text").write("GET", "/health", None, 200, 1.0, AccessFacts())
    assert stream.flushes == [stream.getvalue()] and stream.getvalue().count("\n") == 1


@pytest.mark.parametrize(
    "wall_s",
    [1e9, 1e9 + 0.0004, 1e9 + 0.9994, 1e9 + 0.9999996, 1764921661.1234567, 1764921661.9995,
     0.0, 59.9999999, -0.25, -1.9999997],
)  # fmt: skip
def test_the_line_s_time_is_iso_time_s(logger: logging.Logger, wall_s: float) -> None:
    stream, _ = _plain(logger)
    moments = iter([wall_s, wall_s + 1.5, wall_s])  # the next second's text, and back
    log = AccessLog(cast(Any, None), "text", logger=logger, wall_clock=lambda: next(moments))
    for _ in range(3):
        log.write("GET", "/health", None, 200, 1.0, AccessFacts())
    log.flush()
    times = [line.split(" ", 1)[0] for line in stream.getvalue().splitlines()]
    assert times == [iso_time(wall_s), iso_time(wall_s + 1.5), iso_time(wall_s)]
