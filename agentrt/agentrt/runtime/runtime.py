"""``Runtime``: the SDK's root object — built from a ``RuntimeConfig``, used with ``async with``.

It owns the connection pools (under the transport stack of ``agentrt.runtime.transports``),
the controller link (session and program events), the journal, the telemetry instruments and
the tool-duration history. Nothing is global: two runtimes in one process are independent
(docs/architecture.md, "Design rules").
"""

from __future__ import annotations

import logging
import math
from contextlib import AsyncExitStack
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import openai

from agentrt.errors import AgentrtError, ConfigError
from agentrt.fasthttp import FastHTTPTransport
from agentrt.journal.api import StepJournal
from agentrt.runtime.config import RuntimeConfig
from agentrt.runtime.controller import ControllerLink, LinkState
from agentrt.runtime.frame import CURRENT_FRAME
from agentrt.runtime.models import ServedModel
from agentrt.runtime.program import Program, ProgramOperation
from agentrt.runtime.telemetry import Instruments
from agentrt.runtime.transports.deadline import DeadlineTransport
from agentrt.runtime.transports.fallback import FallbackTransport
from agentrt.runtime.transports.recording import RecordingTransport
from agentrt.runtime.transports.retry import RetryTransport
from agentrt.runtime.transports.sharding import ShardedTransport
from agentrt.runtime.transports.tagging import TaggingTransport
from agentrt.tools.durations import DurationHistory

if TYPE_CHECKING:
    from agentrt.journal.journal import Journal

__all__ = ["CURRENT_RUNTIME", "Runtime", "current_runtime"]

_log = logging.getLogger("agentrt.runtime")
#: Connections per pool shard. Each pool is the lean transport (agentrt.fasthttp), whose
#: ``https`` requests go to httpcore's pool: its work per event grows with connections times
#: queued requests, so many small pools stay fast where one big one stalls.
_CONNECTIONS_PER_POOL = 64


class Runtime:
    """Runs agent programs against one OpenAI-compatible endpoint (a controller or a server).

    ``Runtime(config)`` validates nothing more than ``RuntimeConfig`` did; ``async with`` opens
    the pool, probes the controller (``controller`` mode), opens the journal, and closes all of
    it on exit. Inside, ``agentrt.chat`` and friends work without naming the runtime.
    """

    def __init__(self, config: RuntimeConfig) -> None:
        if not isinstance(config, RuntimeConfig):
            raise ConfigError(f"Runtime needs a RuntimeConfig, got {type(config).__name__}")
        self.config = config
        self.instruments = Instruments(config.tracer_provider, config.meter_provider)
        self.link = ControllerLink(config)
        #: The model calls use when neither they nor the config name one (discovered once).
        self.served_model = ServedModel(config.base_url, config.api_key)
        url = httpx.URL(config.base_url)
        self.server_address: str = url.host
        self.server_port: int = url.port or (443 if url.scheme == "https" else 80)
        self.tool_history = DurationHistory()
        if isinstance(config.journal, str):
            _journal_for(config.journal, config)  # a bad journal URL fails here, at construction
            self._journal: StepJournal | None = None
        else:
            self._journal = config.journal
        self._stack: AsyncExitStack | None = None
        self._transport: RecordingTransport | None = None
        #: The fallback layer of the transport stack, when ``fallback_base_url`` is set.
        self._fallback: FallbackTransport | None = None
        self._default_client: openai.AsyncOpenAI | None = None
        self._token: Token[Runtime | None] | None = None

    # ----------------------------------------------------------------- properties
    @property
    def session_id(self) -> str:
        """The session id sent with every call (the controller's, once connected)."""
        return self.link.session_id

    @property
    def controller_state(self) -> LinkState:
        """``connected``, ``absent``, ``unreachable`` or ``off`` (see ``ControllerLink``)."""
        return self.link.state

    @property
    def journal(self) -> StepJournal | None:
        return self._journal

    @property
    def transport(self) -> httpx.AsyncBaseTransport:
        """The top of the runtime's transport stack (every client handed out sends through
        it); its ``aclose`` is a no-op."""
        self.require_open()
        assert self._transport is not None
        return self._transport

    def require_open(self) -> None:
        if self._transport is None:
            raise AgentrtError("the Runtime is not open: use `async with Runtime(config) as rt:`")

    # ----------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> Runtime:
        if self._stack is not None:
            raise AgentrtError("this Runtime is already open")
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            cfg = self.config
            shards: list[httpx.AsyncBaseTransport]
            if cfg.http_transport is not None:
                shards, per_shard = [cfg.http_transport], cfg.max_connections
            else:
                count = math.ceil(cfg.max_connections / _CONNECTIONS_PER_POOL)
                per_shard = math.ceil(cfg.max_connections / count)
                pools = [FastHTTPTransport(per_shard) for _ in range(count)]
                for pool in pools:
                    stack.push_async_callback(_close_shielded, pool)
                shards = list(pools)
            stack.push_async_callback(self.link.close)
            state = await self.link.open()  # the session id the tags carry is known after it
            self._transport = self._transport_stack(ShardedTransport(shards, per_shard))
            if state == "unreachable" and self._fallback is not None:
                _log.warning("controller unreachable: calls go to %s", cfg.fallback_base_url)
                self._fallback.use_fallback_now()
            if isinstance(cfg.journal, str):
                self._journal = await stack.enter_async_context(_journal_for(cfg.journal, cfg))
            self._default_client = self.openai_client()
        except BaseException:
            self._transport = self._fallback = None
            await stack.aclose()
            raise
        self._stack = stack
        self._token = CURRENT_RUNTIME.set(self)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            CURRENT_RUNTIME.reset(self._token)
            self._token = None
        stack, self._stack = self._stack, None
        self._transport = self._fallback = None
        self._default_client = None
        if isinstance(self.config.journal, str):
            self._journal = None
        if stack is not None:
            await stack.aclose()

    def _transport_stack(self, pools: ShardedTransport) -> RecordingTransport:
        """recording → retry → deadline → tagging → [fallback →] pools
        (agentrt.runtime.transports)."""
        cfg = self.config
        routed: httpx.AsyncBaseTransport = pools
        if cfg.fallback_base_url:
            self._fallback = FallbackTransport(
                pools,
                base_url=cfg.base_url,
                fallback_base_url=cfg.fallback_base_url,
                fallback_api_key=cfg.fallback_api_key or cfg.api_key,
                hold_s=cfg.fallback_hold_s,
            )
            routed = self._fallback
        tagged = TaggingTransport(routed, self.session_id, peer_hints=cfg.peer_hints)
        # Retry above the deadline layer: each resend gets a fresh budget check and header.
        retried = RetryTransport(DeadlineTransport(tagged), cfg.retry_budget_s)
        return RecordingTransport(retried, self)

    # ----------------------------------------------------------------- programs and clients
    def program(
        self,
        name: str = "program",
        *,
        program_id: str | None = None,
        timeout_s: float | None = None,
        deadline: float = math.inf,
        operation: ProgramOperation = "invoke_workflow",
    ) -> Program:
        """A program run, used as ``async with rt.program("name", timeout_s=30) as prog``.

        ``program_id``: reuse an id to re-run (replay) a program from the journal; default a
        fresh random id. ``deadline``: absolute time on the anyio clock (``math.inf`` = none);
        ``timeout_s``: relative budget (seconds) — the earlier of both applies.
        """
        return Program(
            self,
            name,
            program_id=program_id,
            deadline=deadline,
            timeout_s=timeout_s,
            operation=operation,
        )

    def http_client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` whose requests are tagged (for frameworks that take one).

        Closing it does not close the runtime's pool."""
        kwargs.setdefault("timeout", httpx.Timeout(self.config.request_timeout_s, connect=10.0))
        return httpx.AsyncClient(transport=self.transport, **kwargs)

    def openai_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` for ``base_url`` whose every call is tagged with the
        program it is made in (or an ad-hoc one). ``kwargs`` override the client's options."""
        kwargs.setdefault("base_url", self.config.base_url)
        kwargs.setdefault("api_key", self.config.api_key)
        kwargs.setdefault("max_retries", self.config.max_retries)
        kwargs.setdefault("timeout", self.config.request_timeout_s)
        kwargs.setdefault("http_client", self.http_client())
        return openai.AsyncOpenAI(**kwargs)

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The runtime's own tagged client (used by the SDK helpers)."""
        self.require_open()
        assert self._default_client is not None
        return self._default_client

    def __repr__(self) -> str:
        return f"Runtime({self.config!r}, session_id={self.session_id!r})"


#: The runtime entered with ``async with`` in this context (for helpers called outside a program).
CURRENT_RUNTIME: ContextVar[Runtime | None] = ContextVar("agentrt_runtime", default=None)


def current_runtime(runtime: Runtime | None = None) -> Runtime:
    """``runtime`` if given, else the one of the current program, else the innermost entered
    runtime; raises ``AgentrtError`` when there is none."""
    if runtime is not None:
        return runtime
    frame = CURRENT_FRAME.get()
    if frame is not None:
        run_runtime = frame.run.runtime
        # Program runs hold their runtime as RuntimeServices; only a Runtime makes them.
        assert isinstance(run_runtime, Runtime), run_runtime
        return run_runtime
    entered = CURRENT_RUNTIME.get()
    if entered is None:
        raise AgentrtError("no agentrt Runtime here: use `async with Runtime(config) as rt:`")
    return entered


async def _close_shielded(pool: httpx.AsyncBaseTransport) -> None:
    """Close a connection pool even when the runtime exits cancelled: its sockets must be
    closed now, not by the garbage collector."""
    with anyio.CancelScope(shield=True):
        await pool.aclose()


def _journal_for(url: str, config: RuntimeConfig) -> Journal:
    """The journal store behind ``url``; no I/O yet. Raises ``ConfigError`` for a bad URL."""
    from agentrt.journal import Journal

    return Journal(
        url,
        lease_ttl_s=config.journal_lease_ttl_s,
        lease_wait_s=config.journal_lease_wait_s,
    )
