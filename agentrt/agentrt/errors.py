"""The one error tree of the agentrt project (SDK, controller, engine emulator, simulator).

Users catch these, never httpx's, SQLAlchemy's or openai's: third-party errors are translated
at the boundary with ``raise OurError(...) from exc``.

::

    AgentrtError                      root of everything we raise
    ├── ConfigError                   invalid configuration, raised at construction
    ├── ProtocolError                 a malformed agentrt header or program event
    ├── DeadlineExceeded              the program's deadline passed (also a TimeoutError)
    ├── LLMCallError                  an LLM call failed after its retries
    │   └── EndpointUnavailable       the controller / server could not be reached
    ├── ToolError                     a tool failed
    │   ├── ToolArgumentsInvalid      the model's arguments did not validate
    │   ├── ToolTimeout               the tool ran past its own timeout
    │   └── ToolFailed                the tool raised; its error went back to the model
    ├── JournalError                  the intent journal failed
    │   ├── JournalUnavailable        the store cannot be reached: side effects fail closed
    │   ├── SchemaVersionError        the store's schema is newer / corrupt
    │   ├── NonDeterminismError       a re-run asked for a different step at a recorded position
    │   ├── ResultNotSerializable     a tool result that cannot be stored
    │   ├── UnknownOutcome            a side effect STARTED with no recorded result
    │   ├── ProgramLeaseHeld          the program id runs elsewhere (its lease is live)
    │   └── ProgramLeaseLost          this run lost its program lease: its writes are fenced
    └── EngineError                   the engine emulator refused a request
        └── InvalidRequest            bad input to the engine (maps to HTTP 4xx)

Packages may define narrower subclasses in their own modules; they must derive from one of the
classes above.
"""

from __future__ import annotations

__all__ = [
    "AgentrtError",
    "ConfigError",
    "DeadlineExceeded",
    "EndpointUnavailable",
    "EngineError",
    "InvalidRequest",
    "JournalError",
    "JournalUnavailable",
    "LLMCallError",
    "NonDeterminismError",
    "ProgramLeaseHeld",
    "ProgramLeaseLost",
    "ProtocolError",
    "ResultNotSerializable",
    "SchemaVersionError",
    "ToolArgumentsInvalid",
    "ToolError",
    "ToolFailed",
    "ToolTimeout",
    "UnknownOutcome",
]


class AgentrtError(Exception):
    """Root of every error raised by agentrt."""


class ConfigError(AgentrtError, ValueError):
    """Invalid configuration; raised when the object is constructed, not later."""


class ProtocolError(AgentrtError, ValueError):
    """A malformed agentrt header, event or message on the wire."""


class DeadlineExceeded(AgentrtError, TimeoutError):
    """The program's deadline passed; the remaining work was cancelled."""


class LLMCallError(AgentrtError):
    """An LLM call failed (after the configured retries)."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        #: HTTP status of the last failed attempt, or None when no response came back.
        self.status_code = status_code


class EndpointUnavailable(LLMCallError):
    """The controller or the model server could not be reached."""


class ToolError(AgentrtError):
    """A tool failed."""


class ToolArgumentsInvalid(ToolError, ValueError):
    """The arguments given to a tool did not validate against its schema."""


class ToolTimeout(ToolError, TimeoutError):
    """A tool ran past its own timeout."""


class ToolFailed(ToolError):
    """A tool raised an exception that is handed back to the model as the call's result
    (``@tool(on_error="return")``, ``RuntimeConfig.tool_on_error``; docs/sdk.md). The
    tool's own exception is the ``__cause__``."""


class JournalError(AgentrtError):
    """The intent journal failed."""


class JournalUnavailable(JournalError):
    """The journal store cannot be reached; side-effecting tools refuse to run."""


class SchemaVersionError(JournalError):
    """The journal database is corrupt or has a schema this version does not know."""


class NonDeterminismError(JournalError):
    """A re-run of a program asked for a different step than the one recorded there."""


class ResultNotSerializable(JournalError, TypeError):
    """A tool result cannot be serialised into the journal."""


class UnknownOutcome(JournalError):
    """A side effect was started but its outcome was never recorded.

    It may or may not have happened. It is never re-run blindly: the caller must reconcile it.
    """

    def __init__(self, message: str, *, key: str, intent: object = None) -> None:
        super().__init__(message)
        #: The idempotency key of the step whose outcome is unknown.
        self.key = key
        #: The journal's record of the intent (a dataclass of the journal module), if known.
        self.intent = intent


class ProgramLeaseHeld(JournalError):
    """Another runner holds the live lease of this program id: it runs somewhere else now."""

    def __init__(self, message: str, *, program_id: str, holder: str, expires_at: float) -> None:
        super().__init__(message)
        #: The program whose lease is held.
        self.program_id = program_id
        #: Who holds it (host, pid and runtime id).
        self.holder = holder
        #: When the lease expires unless renewed (epoch seconds).
        self.expires_at = expires_at


class ProgramLeaseLost(JournalError):
    """This run lost its program lease (it was taken over or broken): it must stop; every
    journal write it attempts is refused (fenced by the lease epoch)."""


class EngineError(AgentrtError):
    """The engine emulator refused or failed a request."""


class InvalidRequest(EngineError, ValueError):
    """Bad input to the engine: it maps to an HTTP 4xx with an OpenAI-style error body."""

    def __init__(self, message: str, *, status_code: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        #: HTTP status to answer with (400, 404, 413, ...).
        self.status_code = status_code
        #: The offending request field, when one can be named.
        self.param = param


# ----------------------------------------------------------------- messages that suggest a fix
# Used where the SDK translates a transport failure into one of the errors above, so that every
# path (chat, discovery, adapters) names the URL it tried and what to do about it.


def unreachable_message(base_url: str, exc: BaseException) -> str:
    """Why ``base_url`` could not be reached, as a user reads it: the URL, the likely cause
    (no server listening; ``https://`` to a server speaking plain HTTP) and the fix."""
    cause = _innermost(exc)
    text = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    if base_url.startswith("https://") and _looks_like_tls_mismatch(exc):
        plain = "http://" + base_url[len("https://") :]
        return (
            f"cannot connect to {base_url}: the TLS handshake failed — is it a plain HTTP "
            f"server? then use {plain} ({text})"
        )
    return f"cannot connect to {base_url}: is the server running? ({text})"


def http_error_message(base_url: str, url: str, status_code: int, detail: str) -> str:
    """An HTTP error answer of ``url`` (under ``base_url``), with the fix when one is likely:
    a 404 from a base URL that lacks the ``/v1`` of OpenAI-compatible servers."""
    message = f"{url} answered HTTP {status_code}: {detail}"
    hint = missing_v1_hint(base_url, status_code)
    return f"{message} — {hint}" if hint else message


def missing_v1_hint(base_url: str, status_code: int) -> str | None:
    """``did you mean …/v1?`` for a 404 from a base URL without ``/v1``; None otherwise."""
    base = base_url.rstrip("/")
    if status_code != 404 or base.endswith("/v1"):
        return None
    return f"did you mean {base}/v1?"


def _innermost(exc: BaseException) -> BaseException:
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or exc.__context__
        if nxt is None:
            break
        exc = nxt
    return exc


def _looks_like_tls_mismatch(exc: BaseException) -> bool:
    import ssl

    current: BaseException | None = exc
    seen: set[int] = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).upper()
        if isinstance(current, ssl.SSLError) or "SSL" in text or "TLS" in text:
            return True
        current = current.__cause__ or current.__context__
    return False
