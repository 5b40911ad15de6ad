"""Builds a :class:`~agentrt_controller.backends.api.Backend` from a :class:`BackendSpec`.

The kinds are listed here explicitly (no global registry); an unknown kind or option is a
:class:`~agentrt.errors.ConfigError` at start-up, never a silent fallback. Options per kind
(docs/backends.md):

=========  ===========================================================================
all        ``probe_timeout_s`` (2), ``aux_timeout_s`` (10), ``api_key`` (the controller's own
           credential for the server: the backend sends it on every request), ``models``
           (``a|b``: the models it serves, instead of asking its ``/v1/models``)
vllm       ``token_cache_entries`` (4096); ``priority=auto`` allowed
emulator   as vllm; pins are always on
(none)     as vllm; detected at start-up: ``emulator`` when the server is our emulator, else
           ``vllm`` (:class:`~agentrt_controller.backends.emulator.DetectedBackend`)
sglang     ``priority_order`` (higher_first | lower_first), ``priority_top`` (100),
           ``pins`` (off), ``default_pin_ttl_s`` (300)
openai     —
=========  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict, TypeVar

from agentrt.errors import ConfigError
from agentrt_controller.backends.api import Backend
from agentrt_controller.backends.emulator import DetectedBackend, EmulatorBackend
from agentrt_controller.backends.http import (
    HttpBackendConfig,
    OpenAIBackend,
    VllmBackend,
    VllmBackendConfig,
)
from agentrt_controller.backends.sglang import SGLangBackend, SGLangBackendConfig
from agentrt_controller.backends.spec import BackendSpec, _parse_bool
from agentrt_controller.backends.transport import HttpPool

__all__ = ["BACKEND_KINDS", "build_backend"]

#: ``(spec, http) -> Backend``; ``http`` is shared by all backends and owned by the caller.
BackendFactory = Callable[[BackendSpec, HttpPool], Backend]

_T = TypeVar("_T")


class _Common(TypedDict):
    """The options every HTTP kind takes (:class:`HttpBackendConfig`'s fields)."""

    probe_timeout_s: float
    aux_timeout_s: float
    credential: str | None
    models: tuple[str, ...]


class _Options:
    """Takes typed kind options out of ``spec.options``; :meth:`done` rejects the rest."""

    def __init__(self, spec: BackendSpec) -> None:
        self.spec = spec
        self.left = dict(spec.options)

    def _parsed(self, name: str, parse: Callable[[str], _T], what: str) -> _T | None:
        """The option ``name`` parsed (``None`` when not given); ConfigError: not ``what``."""
        raw = self.left.pop(name, None)
        if raw is None:
            return None
        try:
            return parse(raw)
        except ValueError:
            raise ConfigError(f"backend {self.spec.backend_id}: {name} must be {what}") from None

    def number(self, name: str, default: float, *, positive: bool = True) -> float:
        value = self._parsed(name, float, "a number")
        if value is None:
            return default
        if positive and not value > 0:
            raise ConfigError(f"backend {self.spec.backend_id}: {name} must be > 0")
        return value

    def integer(self, name: str, default: int) -> int:
        value = self._parsed(name, int, "an integer")
        if value is None:
            return default
        if value < 0:
            raise ConfigError(f"backend {self.spec.backend_id}: {name} must be >= 0")
        return value

    def switch(self, name: str, default: bool) -> bool:
        raw = self.left.pop(name, None)
        return default if raw is None else _parse_bool(name, raw)

    def choice(self, name: str, default: str, allowed: tuple[str, ...]) -> str:
        value = self.left.pop(name, default)
        if value not in allowed:
            raise ConfigError(
                f"backend {self.spec.backend_id}: {name} must be one of {list(allowed)}"
            )
        return value

    def common(self) -> _Common:
        return {
            "probe_timeout_s": self.number("probe_timeout_s", 2.0),
            "aux_timeout_s": self.number("aux_timeout_s", 10.0),
            "credential": self.left.pop("api_key", None),
            "models": self.models(),
        }

    def models(self) -> tuple[str, ...]:
        """The ``models`` option: model ids separated by ``|`` (``a|b``); ``()`` = none."""
        raw = self.left.pop("models", None)
        if raw is None:
            return ()
        models = tuple(m.strip() for m in raw.split("|"))
        if not all(models):
            raise ConfigError(
                f"backend {self.spec.backend_id}: models must be model ids separated by '|', "
                f"got {raw!r}"
            )
        return models

    def done(self) -> None:
        if self.left:
            raise ConfigError(
                f"backend {self.spec.backend_id}: unknown options {sorted(self.left)}"
            )


def _no_auto(spec: BackendSpec) -> bool:
    if spec.priority == "auto":
        raise ConfigError(
            f"backend {spec.backend_id}: priority=auto needs kind vllm or emulator; use on or off"
        )
    return spec.priority


def _openai(spec: BackendSpec, http: HttpPool) -> Backend:
    options = _Options(spec)
    common = options.common()
    options.done()
    config = HttpBackendConfig(send_priority=_no_auto(spec), **common)
    return OpenAIBackend(spec.backend_id, spec.url, http, config)


def _vllm_like(cls: type[VllmBackend]) -> BackendFactory:
    def build(spec: BackendSpec, http: HttpPool) -> Backend:
        options = _Options(spec)
        common = options.common()
        entries = options.integer("token_cache_entries", 4096)
        options.done()
        config = VllmBackendConfig(
            send_priority=spec.priority, token_cache_entries=entries, **common
        )
        return cls(spec.backend_id, spec.url, http, config)

    return build


def _sglang(spec: BackendSpec, http: HttpPool) -> Backend:
    options = _Options(spec)
    common = options.common()
    order = options.choice("priority_order", "higher_first", ("higher_first", "lower_first"))
    top = options.integer("priority_top", 100)
    pins = options.switch("pins", False)
    ttl = options.number("default_pin_ttl_s", 300.0)
    options.done()
    config = SGLangBackendConfig(
        send_priority=_no_auto(spec),
        priority_order="lower_first" if order == "lower_first" else "higher_first",
        priority_top=top,
        pins=pins,
        default_pin_ttl_s=ttl,
        **common,
    )
    return SGLangBackend(spec.backend_id, spec.url, http, config)


#: Kind name -> constructor. Extend by passing your own mapping to :func:`build_backend`.
BACKEND_KINDS: Mapping[str, BackendFactory] = {
    "vllm": _vllm_like(VllmBackend),
    "emulator": _vllm_like(EmulatorBackend),
    "sglang": _sglang,
    "openai": _openai,
}

#: A spec without a kind: vllm's options, the kind decided by a probe.
_DETECTED: BackendFactory = _vllm_like(DetectedBackend)


def build_backend(
    spec: BackendSpec,
    http: HttpPool,
    kinds: Mapping[str, BackendFactory] = BACKEND_KINDS,
) -> Backend:
    """Construct the backend ``spec`` names; with ``spec.detect_kind`` one that decides
    between ``emulator`` and ``vllm`` by asking the server (:class:`DetectedBackend`).
    Raises :class:`ConfigError` for unknown kinds."""
    factory = _DETECTED if spec.detect_kind else kinds.get(spec.kind)
    if factory is None:
        raise ConfigError(f"unknown backend kind {spec.kind!r}; known: {sorted(kinds)}")
    try:
        return factory(spec, http)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"backend {spec.backend_id}: {exc}") from exc
