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

from agentrt_controller.service.http.access_log import AccessFacts, AccessLog
from agentrt_serving.logs import server_log_config

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
        self.flushes: list[str] = []  # what the stream held at each flush

    def flush(self) -> None:
        self.flushes.append(self.getvalue())
        super().flush()


@pytest.mark.anyio
async def test_lines_of_one_event_loop_turn_are_flushed_once_at_its_end(
    logger: logging.Logger,
) -> None:
    _stream, handler = _plain(logger)
    stream = _CountingStream()
    handler.setStream(stream)
    log = _log(logger, "text")
    for index in range(3):
        log.write("POST", f"/v1/completions/{index}", "t", 200, 1.0, AccessFacts())
    assert stream.getvalue().count("\n") == 3 and stream.flushes == []
    await asyncio.sleep(0)  # the end of the turn
    assert stream.flushes == [stream.getvalue()]
    log.write("GET", "/health", None, 200, 1.0, AccessFacts())
    await asyncio.sleep(0)
    assert len(stream.flushes) == 2 and stream.flushes[-1].count("\n") == 4
