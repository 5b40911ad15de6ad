"""How the servers' processes log: one setup for the controller and the engine emulator.

Every line a server process writes to stderr starts with a wall-clock timestamp in ISO 8601
(UTC, milliseconds), then the level and the logger's name::

    2026-12-05T08:21:01.123Z WARNING agentrt.controller: backend b3 is up (health probe succeeded)

so lines can be matched with the access log, traces and introspection (whose times are
wall-clock ISO 8601 too). :func:`server_log_config` is the ``logging.config.dictConfig``
dictionary the CLI servers hand to uvicorn (uvicorn applies it when it is configured); embedded
servers (tests, the demo) leave the host program's logging alone.

The controller's access log (``agentrt.access``, one line per request) has its own handler on
**standard output** with the line as is: it carries its own ``time`` field, and its JSON form
must stay one JSON object per line. Diagnostics go to standard error, as before.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import math
from typing import Any

__all__ = ["ACCESS_LOGGER", "IsoFormatter", "iso_time", "server_log_config"]

#: The logger of the controller's access log (one line per request).
ACCESS_LOGGER = "agentrt.access"
#: uvicorn's extra level below DEBUG (``--log-level trace`` in a file or the environment).
_TRACE = 5
_LEVELS = {"critical": 50, "error": 40, "warning": 30, "info": 20, "debug": 10, "trace": _TRACE}


def iso_time(wall_s: float) -> str:
    """``wall_s`` (seconds since the epoch) as ISO 8601 in UTC with milliseconds and a ``Z``,
    e.g. ``2026-12-05T08:21:01.123Z``; formatted once per millisecond (under load several
    access-log lines fall in the same one)."""
    global _last_milli
    # Rounded to the microsecond first, as datetime.fromtimestamp does.
    fraction, whole = _modf(wall_s)
    milli = (int(whole) * 1_000_000 + round(fraction * 1e6)) // 1000
    last = _last_milli  # one read: a formatter may run in another thread
    if last[0] == milli:
        return last[1]
    second, millis = divmod(milli, 1000)
    text = f"{_iso_second(second)}.{millis:03d}Z"
    _last_milli = (milli, text)
    return text


_modf = math.modf
#: The millisecond :func:`iso_time` formatted last, and its text.
_last_milli: tuple[int, str] = (-1, "")


@functools.lru_cache(maxsize=8)
def _iso_second(second: int) -> str:
    """Up to the seconds (formatted once per second: the access log writes a line per
    request)."""
    return dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


class IsoFormatter(logging.Formatter):
    """``<ISO 8601 time> <LEVEL> <logger>: <message>`` (tracebacks follow on their own lines)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso_time(record.created)


def server_log_config(log_level: str, *, access_log: bool = False) -> dict[str, Any]:
    """The ``dictConfig`` of a server process: every logger (uvicorn's, ours, the libraries')
    through one stderr handler with :class:`IsoFormatter` at ``log_level`` (``critical`` ...
    ``debug``, ``trace``); with ``access_log``, the ``agentrt.access`` logger's lines on
    stdout at INFO whatever ``log_level`` (its own switch is ``--access-log``). Raises
    :class:`KeyError` for an unknown level (the config refuses those first)."""
    level = _LEVELS[log_level.lower()]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        # uvicorn sets "use_colors" on formatters named "default" and "access" when asked to.
        "formatters": {
            "default": {"()": IsoFormatter},
            "access": {"format": "%(message)s"},
        },
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            },
            "access": {
                "class": "logging.StreamHandler",
                "formatter": "access",
                "stream": "ext://sys.stdout",
            },
        },
        "loggers": {
            # uvicorn's own loggers go through the root handler (uvicorn's default config
            # gives them handlers of their own, without a time).
            "uvicorn": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.error": {"handlers": [], "level": level, "propagate": True},
            "uvicorn.access": {"handlers": [], "level": level, "propagate": True},
            ACCESS_LOGGER: {
                "handlers": ["access"] if access_log else [],
                "level": logging.INFO if access_log else logging.CRITICAL + 1,
                "propagate": False,
            },
        },
        "root": {"handlers": ["default"], "level": level},
    }
