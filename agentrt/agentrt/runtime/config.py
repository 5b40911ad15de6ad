"""``RuntimeConfig``: everything a ``Runtime`` needs, validated when it is constructed.

The endpoint and its key may come from the environment, as the ``openai`` client takes them
(docs/sdk.md, "Endpoint and key"); the first that is set wins:

1. the argument (``RuntimeConfig(base_url=..., api_key=...)``);
2. ``AGENTRT_BASE_URL`` / ``AGENTRT_API_KEY`` — agentrt's own, so a program's calls can go to
   the controller while other OpenAI clients in the same process keep their endpoint;
3. ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` — what every OpenAI-client user has set;
4. no URL: :class:`ConfigError` naming the three places; no key: ``"EMPTY"`` (what vLLM
   accepts when started without a key).

The URL and the key are looked up apart: ``base_url`` given and ``OPENAI_API_KEY`` set sends
that key to ``base_url``, as the ``openai`` client does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from agentrt.errors import ConfigError
from agentrt.protocol import CallTags

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "PEER_HINTS",
    "ControllerMode",
    "RuntimeConfig",
    "ToolErrorMode",
    "resolve_endpoint",
]

#: Environment variables read for ``base_url`` when it is not given, first set wins.
BASE_URL_ENV = ("AGENTRT_BASE_URL", "OPENAI_BASE_URL")
#: Routers whose own program hints the SDK can write into an LLM call's body
#: (``RuntimeConfig.peer_hints``; docs/protocol.md, "Hints for other routers").
PEER_HINTS = ("vllm-router",)
#: Environment variables read for ``api_key`` when it is not given, first set wins.
API_KEY_ENV = ("AGENTRT_API_KEY", "OPENAI_API_KEY")
#: The key sent when none is given or set (vLLM accepts any value unless started with a key).
_NO_KEY = "EMPTY"


def _first_set(names: tuple[str, ...], environ: Mapping[str, str]) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def resolve_endpoint(
    base_url: str, api_key: str, environ: Mapping[str, str]
) -> tuple[str | None, str]:
    """``(base_url, api_key)`` after the module docstring's order: an empty argument is not
    given and is looked up in ``environ`` (:data:`BASE_URL_ENV`, :data:`API_KEY_ENV`). The URL
    is ``None`` when it is nowhere; the key is then ``"EMPTY"``."""
    url = base_url or _first_set(BASE_URL_ENV, environ)
    key = api_key or _first_set(API_KEY_ENV, environ) or _NO_KEY
    return url, key


#: ``auto``: probe the controller's session endpoint at start; use it when there, work without
#: it when the server is a plain OpenAI-compatible one (404), go to ``fallback_base_url`` when
#: it is unreachable. ``required``: fail at start (and on any event error) without it.
#: ``off``: never talk to a controller.
ControllerMode = Literal["auto", "required", "off"]

#: What an exception a tool raises (other than a ``ToolError``, a ``JournalError`` or the
#: program's deadline) does. ``return``: it becomes an error result (``ToolFailed``) that goes
#: back to the model, which may fix its call or go on without it — as the OpenAI Agents SDK and
#: LangGraph's ``ToolNode`` do by default. ``raise``: it propagates and ends the program.
ToolErrorMode = Literal["return", "raise"]


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """Configuration of one :class:`agentrt.Runtime`. Invalid values raise
    :class:`agentrt.ConfigError` here, at construction, listing every problem."""

    #: OpenAI-compatible endpoint, e.g. ``http://localhost:8000/v1`` (our controller or vLLM);
    #: ``""`` (the default) = from ``AGENTRT_BASE_URL``, else ``OPENAI_BASE_URL`` (module
    #: docstring); a :class:`ConfigError` when neither is set.
    base_url: str = ""
    #: Bearer token sent to ``base_url``; ``""`` (the default) = from ``AGENTRT_API_KEY``, else
    #: ``OPENAI_API_KEY``, else ``"EMPTY"`` (vLLM accepts any value unless started with a key).
    api_key: str = ""
    #: Model used when a call names none; None = the one the server serves, asked of
    #: ``GET {base_url}/models`` on the first call that needs it (the first of several, with a
    #: warning naming the others: :mod:`agentrt.runtime.models`).
    model: str | None = None
    #: Intent journal: a ``StepJournal`` instance, a journal URL (``sqlite+aiosqlite:///f.db``,
    #: ``postgresql+asyncpg://...``) or SQLite file path, opened and closed by the runtime, or
    #: None: no journal — then side-effect tools refuse to run (fail closed) and nothing is
    #: replayed. ``agentrt journal`` reads ``agentrt.journal.DEFAULT_JOURNAL_PATH``
    #: (``.agentrt/journal.sqlite`` under the working directory) by default: the README passes
    #: that path, so the command finds what the program wrote.
    journal: Any = None
    #: Journal LLM calls too, so a re-run replays them (keeps re-runs deterministic up to the
    #: side effects). Only used with a journal.
    journal_llm_calls: bool = True
    #: With a journal URL: length of each program's lease (seconds; renewed every third of it
    #: while the program runs), and how long a program waits for a lease another runner holds
    #: before raising ``ProgramLeaseHeld`` (seconds; 0 = fail at once). docs/journal.md.
    #: For a ``Journal`` instance, set them on the instance.
    journal_lease_ttl_s: float = 30.0
    journal_lease_wait_s: float = 0.0
    controller: ControllerMode = "auto"
    #: Where the program-event endpoints live; None = ``base_url`` without a trailing ``/v1``.
    controller_url: str | None = None
    #: OpenAI-compatible endpoint used when the controller cannot be reached (e.g. a vLLM
    #: server directly); None = no fallback.
    fallback_base_url: str | None = None
    #: Key for the fallback endpoint; None = ``api_key``.
    fallback_api_key: str | None = None
    #: After a connection failure, how long (seconds) calls stay on the fallback before the
    #: primary endpoint is tried again.
    fallback_hold_s: float = 30.0
    #: OpenTelemetry providers; None = the globally configured one if any, else no-op
    #: (docs/tracing.md, "Which providers the SDK uses").
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    #: Record prompts, completions and tool arguments/results in spans.
    capture_content: bool = False
    #: ``gen_ai.provider.name`` of the endpoint (``openai`` for any OpenAI-compatible server).
    provider_name: str = "openai"
    #: Session id to propose to the controller; None = a random one.
    session_id: str | None = None
    #: Timeout (seconds) of a call made without a program deadline.
    request_timeout_s: float = 600.0
    #: Timeout (seconds) of each program-event post and of the controller probe.
    event_timeout_s: float = 2.0
    #: Seconds a request the server never took is sent again (agentrt.runtime.transports.retry):
    #: a connection refused or not made, or a 503 with ``Retry-After`` (waited for, within the
    #: budget) — what a controller restarted in place or draining answers. Backoff with jitter
    #: from 0.1 s up to 1 s between attempts; counted from the call's first refusal, never past
    #: the program's deadline. 0 = off (docs/sdk.md, "Retries").
    retry_budget_s: float = 10.0
    #: Retries of a failed LLM request by the openai client (connection errors, 429, 5xx), on
    #: top of the ``retry_budget_s`` resends.
    max_retries: int = 2
    #: Connection pool size for LLM calls.
    max_connections: int = 1000
    #: Default timeout (seconds) of a tool that declares none; None = only the deadline.
    tool_timeout_s: float | None = None
    #: What an exception from a read-only tool does when the tool says nothing
    #: (``@tool(on_error=...)``): ``return`` it to the model, or ``raise`` it. Side-effecting
    #: tools are not affected: they raise unless they opt in themselves (docs/sdk.md, Tools).
    tool_on_error: ToolErrorMode = "return"
    #: The HTTP transport under the tagging layer (e.g. ``httpx.MockTransport`` in tests and
    #: benchmarks); None = a real connection pool of ``max_connections``. Not closed by the
    #: runtime when given.
    http_transport: httpx.AsyncBaseTransport | None = None
    #: Other routers' program hints written on every LLM call besides the ``X-Agentrt-*``
    #: headers, so a program keeps its identity behind them: ``("vllm-router",)`` adds
    #: ``vllm_xargs.agentic_context`` to the body (:data:`PEER_HINTS`; docs/protocol.md,
    #: "Hints for other routers"). Empty (the default) = the body is sent as the caller made it.
    peer_hints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problems: list[str] = []
        # None is taken as "not given" too (the types say str: a caller's Optional passes)
        if self.api_key is not None and not isinstance(self.api_key, str):
            problems.append("api_key must be a string")
        elif self.base_url is None or isinstance(self.base_url, str):
            base_url, api_key = resolve_endpoint(
                self.base_url or "", self.api_key or "", os.environ
            )
            if base_url is None:
                problems.append(
                    "base_url is required: pass RuntimeConfig(base_url=...) or set "
                    + " or ".join(BASE_URL_ENV)
                )
            else:  # frozen: the resolved values are the config's from here on
                object.__setattr__(self, "base_url", base_url)
            object.__setattr__(self, "api_key", api_key)
        for name in ("base_url", "controller_url", "fallback_base_url"):
            value = getattr(self, name)
            if value is None or (name == "base_url" and value == ""):
                continue  # not given (base_url: reported above)
            problem = _check_url(name, value)
            if problem:
                problems.append(problem)
        if self.controller not in ("auto", "required", "off"):
            problems.append(f"controller must be auto, required or off, got {self.controller!r}")
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            problems.append("model must be a non-empty string or None")
        for name in (
            "request_timeout_s",
            "event_timeout_s",
            "fallback_hold_s",
            "journal_lease_ttl_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 < value < math.inf:
                problems.append(f"{name} must be a positive finite number of seconds")
        if self.tool_timeout_s is not None and not (
            isinstance(self.tool_timeout_s, int | float) and self.tool_timeout_s > 0
        ):
            problems.append("tool_timeout_s must be a positive number of seconds or None")
        if self.tool_on_error not in ("return", "raise"):
            problems.append(f"tool_on_error must be return or raise, got {self.tool_on_error!r}")
        budget = self.retry_budget_s
        if not isinstance(budget, int | float) or not 0 <= budget < math.inf:
            problems.append("retry_budget_s must be a finite number of seconds >= 0")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            problems.append("max_retries must be an integer >= 0")
        if not isinstance(self.max_connections, int) or self.max_connections < 1:
            problems.append("max_connections must be an integer >= 1")
        if self.session_id is not None:
            try:
                CallTags(self.session_id, "p", "main", "n")
            except Exception as exc:
                problems.append(f"session_id: {exc}")
        problems.extend(_check_journal(self.journal))
        wait = self.journal_lease_wait_s
        if not isinstance(wait, int | float) or not 0 <= wait < math.inf:
            problems.append("journal_lease_wait_s must be a finite number of seconds >= 0")
        if self.http_transport is not None and not isinstance(
            self.http_transport, httpx.AsyncBaseTransport
        ):
            problems.append("http_transport must be an httpx.AsyncBaseTransport or None")
        if self.tracer_provider is not None and not hasattr(self.tracer_provider, "get_tracer"):
            problems.append("tracer_provider must be an OpenTelemetry TracerProvider")
        if self.meter_provider is not None and not hasattr(self.meter_provider, "get_meter"):
            problems.append("meter_provider must be an OpenTelemetry MeterProvider")
        if not isinstance(self.peer_hints, tuple) or any(
            hint not in PEER_HINTS for hint in self.peer_hints
        ):
            problems.append(
                f"peer_hints must be a tuple of {', '.join(PEER_HINTS)}, got {self.peer_hints!r}"
            )
        if problems:
            raise ConfigError("invalid RuntimeConfig: " + "; ".join(problems))

    @property
    def events_url(self) -> str:
        """Base URL of the controller's program-event endpoints (without EVENTS_PREFIX)."""
        if self.controller_url is not None:
            return self.controller_url.rstrip("/")
        base = self.base_url.rstrip("/")
        return base[: -len("/v1")] if base.endswith("/v1") else base

    def __repr__(self) -> str:  # never print the keys
        return (
            f"RuntimeConfig(base_url={self.base_url!r}, model={self.model!r}, "
            f"controller={self.controller!r}, fallback_base_url={self.fallback_base_url!r})"
        )


def _check_url(name: str, value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return f"{name} must be a URL string"
    try:
        url = httpx.URL(value)
    except Exception as exc:
        return f"{name} is not a URL ({exc})"
    if url.scheme not in ("http", "https") or not url.host:
        return f"{name} must be an http(s) URL with a host, got {value!r}"
    return None


def _check_journal(journal: object) -> list[str]:
    if journal is None or (isinstance(journal, str) and journal):
        return []
    needed = ("run_step", "record_tool_duration", "predict_tool_duration")
    missing = [m for m in needed if not callable(getattr(journal, m, None))]
    if missing:
        return [f"journal must be a StepJournal, a journal URL or None (missing {missing})"]
    return []
