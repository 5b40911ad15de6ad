"""How a backend is named in configuration: ``URL[,key=value...]``.

Examples::

    http://127.0.0.1:8000                       # kind detected (emulator or vllm)
    http://gpu1:8000,kind=vllm,priority=on,id=gpu1
    http://other:9000/,kind=openai

Keys: ``kind`` (a name known to :func:`agentrt_controller.backends.factory.build_backend`; when
a configuration names none, the controller asks the server once at start-up whether it is our
engine emulator, else uses ``vllm`` — :attr:`BackendSpec.detect_kind`), ``id``
(defaults to ``host:port``), ``priority`` (``on``/``off``: send the scheduler's priority in
the request body — only for servers started with priority scheduling, vLLM rejects it
otherwise; ``auto`` (vllm, emulator): ask the server with one probe request), ``kv_events``
/ ``kv_replay`` / ``kv_topic`` (where the server publishes vLLM's KV-cache events and answers
replays: ``tcp://host:port``; the exact prefix index, docs/backends.md "KV-cache events").
Other keys are kind options (docs/backends.md), validated by the kind. Unknown keys and values
are rejected (no silently ignored switches).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator

from agentrt.errors import ConfigError
from agentrt_controller import defaults
from agentrt_controller.backends.kv_events import check_zmq_endpoint
from agentrt_controller.config_check import SECTION, SectionError, check_fields, parse_section

__all__ = ["BackendSpec"]

#: The keys of a backend's KV-event endpoints (fields of :class:`BackendSpec`).
_KV_KEYS = ("kv_events", "kv_replay", "kv_topic")

_BOOL = {"on": True, "true": True, "1": True, "yes": True, "off": False, "false": False, "0": False,
         "no": False}  # fmt: skip


def _parse_bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _BOOL:
        return _BOOL[value.lower()]
    raise ConfigError(f"backend option {key} must be on or off, got {value!r}")


def _parse_priority(value: object) -> bool | Literal["auto"]:
    if isinstance(value, str) and value.lower() == "auto":
        return "auto"
    try:
        return _parse_bool("priority", value)
    except ConfigError:
        raise ConfigError(
            f"backend option priority must be on, off or auto, got {value!r}"
        ) from None


#: A backend option's value in a config table (kept as its text).
_OptionValue = Annotated[str, BeforeValidator(lambda v: v if isinstance(v, str) else str(v))]


@dataclass(frozen=True, slots=True)
class _BackendTable:
    """A backend as a config-file table (:meth:`BackendSpec.from_mapping`)."""

    __pydantic_config__ = SECTION

    url: str
    #: ``None`` = detected (:attr:`BackendSpec.detect_kind`).
    kind: str | None = None
    id: str = ""
    priority: Annotated[bool | Literal["auto"], BeforeValidator(_parse_priority)] = (
        defaults.PRIORITY
    )
    options: dict[str, _OptionValue] = field(default_factory=dict)
    kv_events: str | None = None
    kv_replay: str | None = None
    kv_topic: str = ""

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One configured backend (an entry of the ``backends`` list); validated on construction
    (:class:`ConfigError`)."""

    __pydantic_config__ = SECTION

    #: Base URL without the ``/v1`` suffix, e.g. ``http://127.0.0.1:8000``.
    url: str
    #: Backend kind (``vllm`` or ``openai``; more kinds may be registered by the factory).
    kind: str = "vllm"
    #: Stable id; ``""`` = derived from the URL's ``host:port``.
    backend_id: str = ""
    #: Send the scheduler's priority in each request body; ``"auto"`` = if the server takes it.
    #: Default ``agentrt_controller.defaults.PRIORITY`` (off: safe against a stock vLLM).
    priority: bool | Literal["auto"] = defaults.PRIORITY
    #: Kind-specific extra options, validated by the kind's constructor.
    options: dict[str, str] = field(default_factory=dict)
    #: No kind was configured (:meth:`parse` / :meth:`from_mapping` without ``kind``): the
    #: controller probes the server (``agentrt_controller.backends.emulator.DetectedBackend``)
    #: and runs it as ``emulator`` when it identifies as our engine emulator, else as
    #: :attr:`kind` (``vllm``). ``False`` (the constructor's default): :attr:`kind` as given.
    detect_kind: bool = False
    #: vLLM's KV-event PUB endpoint (``tcp://host:port``); ``None`` = no KV events.
    kv_events: str | None = None
    #: vLLM's KV-event replay (ROUTER) endpoint; ``None`` = gaps cannot be replayed.
    kv_replay: str | None = None
    #: vLLM's KV-event topic (``""``: every message).
    kv_topic: str = ""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.kv_events is not None:
            check_zmq_endpoint("kv_events", self.kv_events)
        if self.kv_replay is not None:
            if self.kv_events is None:
                raise ConfigError("backend option kv_replay needs kv_events")
            check_zmq_endpoint("kv_replay", self.kv_replay)
        if self.kv_topic and self.kv_events is None:
            raise ConfigError("backend option kv_topic needs kv_events")
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"backend URL must be http(s)://host[:port], got {self.url!r}")
        if self.detect_kind and self.kind != "vllm":
            raise ConfigError(f"a backend with kind {self.kind!r} is not detected")
        url = self.url.rstrip("/")
        if url.endswith("/v1"):
            url = url[:-3]
        object.__setattr__(self, "url", url)
        if not self.backend_id:
            port = parts.port or (443 if parts.scheme == "https" else 80)
            object.__setattr__(self, "backend_id", f"{parts.hostname}:{port}")

    @classmethod
    def parse(cls, text: str) -> BackendSpec:
        """Parse ``URL[,key=value...]``."""
        url, *pairs = [p.strip() for p in text.split(",")]
        table: dict[str, object] = {"url": url}
        options: dict[str, str] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ConfigError(f"backend option must be key=value, got {pair!r} in {text!r}")
            if key in ("kind", "id", "priority", *_KV_KEYS):
                table[key] = value
            else:
                options[key] = value
        return cls.from_mapping({**table, "options": options}, "")

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], path: str = "backend") -> BackendSpec:
        """Build from a config-file table: ``{url, kind?, id?, priority?, options?, kv_events?,
        kv_replay?, kv_topic?}``; ``path`` names the table in messages. Unknown keys and bad
        values raise :class:`ConfigError`."""
        table = parse_section(_BackendTable, data, path)
        try:
            return cls(
                url=table.url,
                kind=table.kind or "vllm",
                backend_id=table.id,
                priority=table.priority,
                options=dict(table.options),
                detect_kind=table.kind is None,
                kv_events=table.kv_events,
                kv_replay=table.kv_replay,
                kv_topic=table.kv_topic,
            )
        except ConfigError as exc:
            raise SectionError(path, [((), str(exc))]) from None
