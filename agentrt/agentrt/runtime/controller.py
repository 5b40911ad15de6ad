"""The SDK's side of the program-event endpoints (agentrt.protocol, docs/protocol.md).

Events are posted inline with a short timeout so that they reach the controller in program
order (a tool-end before the program's next LLM call). They never hang a program: each post
is bounded by ``event_timeout_s``. After a failure the events that would fail the same way
are held back for ``fallback_hold_s`` instead of paying the timeout each time:

* no answer (connection refused, timeout): the controller is unreachable, so the whole link
  stays quiet (a circuit breaker);
* an error answer (4xx / 5xx): the controller refused *this program's* event, so only that
  program's events are held; the runtime's other programs keep reporting.

Failures are logged and counted — raised only in ``required`` mode. Ids go into event URLs
percent-encoded (``/`` and ``.`` too), so every id :mod:`agentrt.protocol` allows reaches its
route intact.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

import anyio
import httpx
from pydantic import BaseModel

from agentrt._version import __version__
from agentrt.errors import EndpointUnavailable, ProtocolError, unreachable_message
from agentrt.fasthttp import FastHTTPTransport
from agentrt.protocol import (
    EVENTS_PREFIX,
    ProgramEnd,
    ProgramStart,
    SessionStart,
    SessionStarted,
    ToolWaitEnd,
    ToolWaitStart,
)
from agentrt.runtime.config import RuntimeConfig

__all__ = ["ControllerLink", "LinkState", "LinkStats"]

_log = logging.getLogger("agentrt.controller")

# Held programs remembered at most; past it, entries whose hold ended are dropped.
_MAX_HELD_PROGRAMS = 1024
# Events posted at once at most (the rest wait for a connection; httpx's own default): each
# program posts its events inline, in order, so this bounds the link's connections only.
_EVENT_CONNECTIONS = 100


def _url_id(value: str) -> str:
    """``value`` as one URL path segment: percent-encoded, dots included (a client or proxy
    would resolve a ``.`` or ``..`` segment away)."""
    return quote(value, safe="").replace(".", "%2E")


#: ``connected``: the controller answered the session probe; ``absent``: the server answered
#: but has no program endpoints (a plain OpenAI-compatible server); ``unreachable``: no answer;
#: ``off``: disabled by config.
LinkState = Literal["connected", "absent", "unreachable", "off"]


@dataclass(slots=True)
class LinkStats:
    """Counters of the event link (for tests, logs and the runtime's ``stats``)."""

    events_sent: int = 0
    events_failed: int = 0
    events_skipped: int = 0


class ControllerLink:
    """Posts session and program events to the controller, if there is one."""

    def __init__(self, config: RuntimeConfig) -> None:
        self._config = config
        self._mode = config.controller
        self._base = config.events_url + EVENTS_PREFIX
        #: The link's connections, from :meth:`open` on: the session's probe and end go
        #: through ``_client`` (httpx), the events straight through the transport under it
        #: (:meth:`FastHTTPTransport.exchange`: no httpx objects per event).
        self._transport: FastHTTPTransport | None = None
        self._client: httpx.AsyncClient | None = None
        self._event_headers: tuple[tuple[bytes, bytes], ...] = ()
        self.state: LinkState = "off"
        self.session_id = config.session_id or f"s-{uuid.uuid4().hex[:16]}"
        self.stats = LinkStats()
        #: The whole link is quiet until then (the controller did not answer).
        self._quiet_until_s = 0.0
        #: Per program id: its events are held until then (the controller refused one).
        self._program_quiet_until_s: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return self.state == "connected"

    async def open(self) -> LinkState:
        """Probe the controller by opening a session. Raises ``EndpointUnavailable`` in
        ``required`` mode when it is absent or unreachable."""
        if self._mode == "off":
            self.state = "off"
            return self.state
        timeout = self._config.event_timeout_s
        self._transport = FastHTTPTransport(_EVENT_CONNECTIONS)
        auth, client = f"Bearer {self._config.api_key}", f"agentrt-sdk/{__version__}"
        self._event_headers = (
            (b"authorization", auth.encode("latin-1")),
            (b"content-type", b"application/json"),
            (b"user-agent", client.encode()),
        )
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout),
            headers={"authorization": auth},
            transport=self._transport,
        )
        body = SessionStart(session_id=self.session_id, client=client)
        try:
            with anyio.fail_after(timeout):
                response = await self._client.post(
                    f"{self._base}/sessions", json=body.model_dump(exclude_none=True)
                )
        except (httpx.HTTPError, TimeoutError, OSError) as exc:
            self.state = "unreachable"
            return self._probe_failed(unreachable_message(self._base, exc))
        if response.status_code in (404, 405):
            self.state = "absent"
            return self._probe_failed(f"{self._base} has no agentrt program endpoints")
        if response.is_error:
            self.state = "unreachable"
            return self._probe_failed(f"controller answered {response.status_code}")
        try:
            started = SessionStarted.model_validate_json(response.content)
        except ValueError as exc:
            self.state = "unreachable"
            if self._mode == "required":
                raise ProtocolError(f"malformed session answer: {exc}") from exc
            return self._probe_failed(f"malformed session answer from the controller: {exc}")
        self.session_id = started.session_id
        self.state = "connected"
        return self.state

    def _probe_failed(self, message: str) -> LinkState:
        if self._mode == "required":
            raise EndpointUnavailable(f"controller required but {message}")
        _log.info("%s; running without program events", message)
        return self.state

    async def close(self) -> None:
        """End the session (best effort, bounded) and close the link."""
        client, self._client = self._client, None
        self._transport = None  # closed with the client
        if client is None:
            return
        try:
            if self.state == "connected":
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(self._config.event_timeout_s),
                ):
                    await client.delete(f"{self._base}/sessions/{_url_id(self.session_id)}")
        except httpx.HTTPError as exc:
            _log.warning("could not end agentrt session %s: %r", self.session_id, exc)
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def program_start(self, program_id: str, event: ProgramStart) -> None:
        await self._post(program_id, "start", event)

    async def program_end(self, program_id: str, event: ProgramEnd) -> None:
        await self._post(program_id, "end", event)
        self._program_quiet_until_s.pop(program_id, None)

    async def tool_start(self, program_id: str, event: ToolWaitStart) -> None:
        await self._post(program_id, "tool-start", event)

    async def tool_end(self, program_id: str, event: ToolWaitEnd) -> None:
        await self._post(program_id, "tool-end", event)

    async def _post(self, program_id: str, kind: str, event: BaseModel) -> None:
        transport = self._transport
        if not self.enabled or transport is None:
            return
        now = anyio.current_time()
        if now < self._quiet_until_s or now < self._program_quiet_until_s.get(program_id, 0.0):
            self.stats.events_skipped += 1
            return
        path = f"/programs/{_url_id(program_id)}/{kind}"
        body = event.model_dump_json(exclude_none=True).encode()
        timeout_s = self._config.event_timeout_s
        try:
            # Shielded: an event about a cancellation must still go out, bounded by the timeout.
            with anyio.CancelScope(shield=True), anyio.fail_after(timeout_s):
                status, answer = await transport.exchange(
                    b"POST",
                    httpx.URL(self._base + path),
                    self._event_headers,
                    body,
                    timeout_s=timeout_s,
                )
        except (httpx.HTTPError, TimeoutError, OSError) as exc:  # no answer: all events wait
            self._failed(path, repr(exc), "events paused", exc)
            self._quiet_until_s = anyio.current_time() + self._config.fallback_hold_s
            return
        if status >= 400:  # an answer: only this program's events wait
            problem = f"controller answered {status}: {answer[:300].decode(errors='replace')}"
            self._failed(path, problem, "this program's events held")
            self._hold_program(program_id)
        else:
            self.stats.events_sent += 1

    def _failed(
        self, path: str, problem: str, consequence: str, cause: BaseException | None = None
    ) -> None:
        self.stats.events_failed += 1
        if self._mode == "required":
            raise EndpointUnavailable(f"program event {path} failed: {problem}") from cause
        _log.warning("program event %s failed (%s); %s", path, problem, consequence)

    def _hold_program(self, program_id: str) -> None:
        now = anyio.current_time()
        held = self._program_quiet_until_s
        if len(held) >= _MAX_HELD_PROGRAMS:
            for expired in [p for p, until in held.items() if until <= now]:
                del held[expired]
        held[program_id] = now + self._config.fallback_hold_s
