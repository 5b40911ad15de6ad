"""The controller's access log: one line per HTTP request, written when the request ends.

Fields (JSON keys; the text form writes them as ``key=value`` after the time, method, path,
status and latency)::

    time               wall clock when the answer ended, ISO 8601 UTC with milliseconds
    method, path       the request line (the path cut at 256 characters; no query string)
    status             the HTTP status sent; null when none was (the client left first)
    latency_ms         from the request head to the answer's last byte (milliseconds)
    tenant             the caller's tenant (null: none authenticated, e.g. a probe)
    session, program   the call's program key (generation calls; null elsewhere)
    model              the model asked for (generation and routed calls)
    backend            the backend that answered (null: none was reached)
    prompt_tokens      tokens charged for the prompt (generation calls; the backend's usage
    completion_tokens  when it reported one, else the controller's count)

Text, e.g.::

    2026-12-05T08:21:01.123Z POST /v1/chat/completions 200 41.7ms tenant=default session=s1
        program=p1 model=m backend=b0 prompt_tokens=120 completion_tokens=16

No prompt, answer, header or credential is ever written. The HTTP layer knows the status and
the latency, the endpoints what the core decided: they fill the request's :class:`AccessFacts`
(in ``scope["state"]``, :func:`access_facts`) and this middleware writes the line, at INFO on
the ``agentrt.access`` logger (the CLI sends it to standard output; ``agentrt_serving.logs``).
When that logger's configuration comes down to writing the line to a stream (the CLI's), the
line is held and written to the stream directly with the lines that follow, in one write and
one flush at most :data:`FLUSH_AFTER_S` later (:meth:`AccessLog.write`; at once past
:data:`FLUSH_CHARS` held, and at the server's exit: :meth:`AccessLog.flush`); any other
configuration gets a log record per line as usual.
``--access-log off`` leaves the middleware out altogether.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agentrt_controller.service.core.tenants import TENANT_STATE, Tenant
from agentrt_serving.asgi import Message, Receive, Scope, Send
from agentrt_serving.hardening import HttpLimits
from agentrt_serving.logs import ACCESS_LOGGER, iso_time
from agentrt_serving.uvicorn_server import GuardedApp

__all__ = [
    "ACCESS_STATE",
    "FLUSH_AFTER_S",
    "FLUSH_CHARS",
    "AccessFacts",
    "AccessLog",
    "AccessLogFormat",
    "access_facts",
]

#: ``off``: no access log; ``text``: ``key=value`` lines; ``json``: one JSON object per line.
AccessLogFormat = Literal["off", "text", "json"]
#: The key of a request's :class:`AccessFacts` in ``scope["state"]``.
ACCESS_STATE = "agentrt.access"
_MAX_PATH = 256
#: The longest a line written straight to its stream is held for one write with the next ones
#: (seconds); and held lines of this many characters are written at once.
FLUSH_AFTER_S = 0.05
FLUSH_CHARS = 16_384


@dataclass(slots=True)
class AccessFacts:
    """What the endpoints learned about one request, for its access-log line (no prompt
    content; ``None`` = not known or not applicable)."""

    session: str | None = None
    program: str | None = None
    model: str | None = None
    #: The backend that answered (its id).
    backend: str | None = None
    #: Tokens charged for the prompt and the answer (tokens).
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def access_facts(scope: Scope) -> AccessFacts | None:
    """The request's :class:`AccessFacts` to fill, ``None`` when the access log is off."""
    facts = scope.get("state", {}).get(ACCESS_STATE)
    return facts if isinstance(facts, AccessFacts) else None


class AccessLog:
    """ASGI middleware writing one access-log line per HTTP request (``text`` or ``json``)
    to ``logger`` at INFO; does nothing extra when that level is disabled. ``limits`` are the
    wrapped app's (uvicorn's settings read them)."""

    def __init__(
        self,
        app: GuardedApp,
        form: Literal["text", "json"],
        *,
        logger: logging.Logger | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.form = form
        self.logger = logger or logging.getLogger(ACCESS_LOGGER)
        self._wall_clock = wall_clock
        #: The attributes of the first line's record, copied for each next one (_record).
        self._template: logging.LogRecord | None = None
        #: The handler and formatter last found to write the message alone (_plain_handler).
        self._checked_handler: logging.Handler | None = None
        self._checked_form: logging.Formatter | None = None
        #: Lines held for one write (:meth:`write`), the handler they go to, their length.
        self._pending: list[str] = []
        self._pending_handler: logging.StreamHandler[Any] | None = None
        self._pending_chars = 0
        #: The write of the held lines, at most FLUSH_AFTER_S after the first of them.
        self._flush_timer: asyncio.TimerHandle | None = None

    @property
    def limits(self) -> HttpLimits:
        return self.app.limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.logger.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        facts = AccessFacts()
        scope.setdefault("state", {})[ACCESS_STATE] = facts
        status: int | None = None

        async def noted_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noted_send)
        finally:
            tenant = scope.get("state", {}).get(TENANT_STATE)
            self.write(scope.get("method", ""), str(scope.get("path", "")),
                       tenant.name if isinstance(tenant, Tenant) else None, status,
                       (time.perf_counter() - started) * 1000.0, facts)  # fmt: skip

    def write(
        self,
        method: str,
        path: str,
        tenant: str | None,
        status: int | None,
        latency_ms: float,
        facts: AccessFacts,
    ) -> None:
        """Write one request's line (the middleware's, and the fast path's:
        service/http/direct.py)."""
        line = self._line(method, path, tenant, status, latency_ms, facts)
        handler = self._plain_handler()
        if handler is None:
            if self._pending:
                self._flush()  # the lines before it first, to their handler
            self.logger.handle(self._record(line))
            return
        # What the handler's emit writes for the line's record, without the record, the
        # filters and the formatting (the line is the whole message), held here and written
        # with the lines that follow within FLUSH_AFTER_S in one write and one flush: a
        # stream without a buffer of its own (PYTHONUNBUFFERED, usual in containers) would
        # otherwise make each line a system call, a third of a call's writes.
        if handler is not self._pending_handler:
            if self._pending:
                self._flush()
            self._pending_handler = handler
        self._pending.append(line)
        chars = self._pending_chars = self._pending_chars + len(line)
        if chars >= FLUSH_CHARS:
            self._flush()
        elif self._flush_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop (a direct use): write now
                self._flush()
                return
            self._flush_timer = loop.call_later(FLUSH_AFTER_S, self._flush_due)

    def _flush_due(self) -> None:
        self._flush_timer = None
        self._flush()

    def _flush(self) -> None:
        """Write the held lines to their handler's stream and flush it (errors go to the
        handler's ``handleError``, as its ``emit`` does)."""
        lines, self._pending = self._pending, []
        self._pending_chars = 0
        handler = self._pending_handler
        if not lines or handler is None:
            return
        terminator = handler.terminator
        try:
            with handler.lock:  # type: ignore[union-attr]  # a StreamHandler has its lock
                handler.stream.write(terminator.join(lines) + terminator)
            handler.flush()
        except Exception:  # as emit does: the handler reports it (logging.raiseExceptions)
            handler.handleError(self._record(lines[-1]))

    def flush(self) -> None:
        """Write the held lines now (the server's exit: the loop and its timer are gone, or
        going)."""
        timer, self._flush_timer = self._flush_timer, None
        if timer is not None:
            timer.cancel()
        self._flush()

    def _plain_handler(self) -> logging.StreamHandler[Any] | None:
        """The logger's one handler when what ``logger.handle`` does with a line comes down to
        writing it to a stream: the logger enabled, without filters, not propagating, and
        its only handler exactly a ``StreamHandler`` that takes INFO, without filters, whose
        formatter writes the message alone (the CLI's setup: ``agentrt_serving.logs``).
        ``None`` for anything else a user configured (their handlers get a record). Checked
        per line, so a configuration changed at run time is followed."""
        logger = self.logger
        handlers = logger.handlers
        if len(handlers) != 1 or logger.filters or logger.propagate or logger.disabled:
            return None
        handler = handlers[0]
        if handler is not self._checked_handler or handler.formatter is not self._checked_form:
            self._checked_handler = self._checked_form = None
            if not _writes_message_alone(handler):
                return None
            self._checked_handler, self._checked_form = handler, handler.formatter
        if handler.filters or handler.level > logging.INFO:
            return None
        return handler  # type: ignore[return-value]  # _writes_message_alone checked it

    def _record(self, line: str) -> logging.LogRecord:
        """The INFO record of ``line``: what ``logger.info(line)`` makes, without logging's
        search of the stack for the caller (which the line does not show) and without
        ``LogRecord.__init__`` (a third of the access log's cost: it reads the thread, the
        process and the source file's name every time). A copy of one record made at the
        first line, with this line's message and time; the thread is the event loop's, the
        same for every line."""
        template = self._template
        if template is None:
            logger = self.logger
            made = logger.makeRecord(logger.name, logging.INFO, __file__, 0, "", (), None)
            template = self._template = made
        record: logging.LogRecord = logging.LogRecord.__new__(logging.LogRecord)
        record.__dict__.update(template.__dict__)
        now = time.time()
        record.msg = line
        record.created = now
        # As LogRecord.__init__ computes them.
        record.msecs = int((now - int(now)) * 1000) + 0.0
        record.relativeCreated = template.relativeCreated + (now - template.created) * 1000
        return record

    def _line(
        self,
        method: str,
        path: str,
        tenant_name: str | None,
        status: int | None,
        latency_ms: float,
        facts: AccessFacts,
    ) -> str:
        moment = iso_time(self._wall_clock())
        path = path[:_MAX_PATH]
        latency = round(latency_ms, 3)
        if self.form == "json":
            fields: dict[str, object] = {
                "time": moment,
                "method": method,
                "path": path,
                "status": status,
                "latency_ms": latency,
                "tenant": tenant_name,
                "session": facts.session,
                "program": facts.program,
                "model": facts.model,
                "backend": facts.backend,
                "prompt_tokens": facts.prompt_tokens,
                "completion_tokens": facts.completion_tokens,
            }
            return json.dumps(fields, separators=(",", ":"))
        line = (
            f"{moment} {_text(method)} {_text(path)} {'-' if status is None else status} "
            f"{latency}ms"
        )
        # The fields after the latency, in the JSON form's order, each only when known.
        for key, value in (
            ("tenant", tenant_name),
            ("session", facts.session),
            ("program", facts.program),
            ("model", facts.model),
            ("backend", facts.backend),
            ("prompt_tokens", facts.prompt_tokens),
            ("completion_tokens", facts.completion_tokens),
        ):
            if value is not None:
                line += f" {key}={_text(value)}"
        return line


def _writes_message_alone(handler: logging.Handler) -> bool:
    """``handler`` is exactly a ``logging.StreamHandler`` whose formatter is exactly a
    ``logging.Formatter`` of ``%(message)s`` (a subclass may do anything in ``emit`` or
    ``format``)."""
    form = handler.formatter
    return (
        type(handler) is logging.StreamHandler
        and type(form) is logging.Formatter
        and type(form._style) is logging.PercentStyle
        and form._fmt == "%(message)s"
    )


#: A value written as is: printable ASCII but space, quote and equals sign (the common case,
#: checked in one match; anything else takes the general test below).
_PLAIN = re.compile(r"[!#-<>-~]+")


@functools.lru_cache(maxsize=4096)  # the same methods, paths, tenants, models, backends
def _text(value: object) -> str:
    """A value for a text line: as is when it is plain, else JSON-quoted (a path or a model
    name with spaces, quotes or control characters cannot forge a field or a line)."""
    text = str(value)
    if _PLAIN.fullmatch(text) or (
        text and text.isprintable() and not any(c in text for c in ' "=')
    ):
        return text
    return json.dumps(text)
