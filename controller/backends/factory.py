"""Builds a :class:`~controller.backends.api.Backend` from a :class:`BackendSpec`.

The kinds are listed here explicitly (no global registry); an unknown kind or option is a
:class:`~agentrt.errors.ConfigError` at start-up, never a silent fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agentrt.errors import ConfigError
from controller.backends.api import Backend
from controller.backends.http import HttpBackend, OpenAIBackend, VllmBackend
from controller.backends.spec import BackendSpec
from controller.backends.transport import HttpPool

__all__ = ["BACKEND_KINDS", "build_backend"]

#: ``(spec, http) -> Backend``; ``http`` is shared by all backends and owned by the caller.
BackendFactory = Callable[[BackendSpec, HttpPool], Backend]


def _http_kind(cls: type[HttpBackend]) -> BackendFactory:
    def build(spec: BackendSpec, http: HttpPool) -> Backend:
        options = dict(spec.options)
        probe_timeout_s = float(options.pop("probe_timeout_s", "2.0"))
        if options:
            raise ConfigError(f"backend {spec.backend_id}: unknown options {sorted(options)}")
        return cls(
            spec.backend_id,
            spec.url,
            http,
            send_priority=spec.priority,
            probe_timeout_s=probe_timeout_s,
        )

    return build


#: Kind name -> constructor. Extend by passing your own mapping to :func:`build_backend`.
BACKEND_KINDS: Mapping[str, BackendFactory] = {
    "vllm": _http_kind(VllmBackend),
    "openai": _http_kind(OpenAIBackend),
}


def build_backend(
    spec: BackendSpec,
    http: HttpPool,
    kinds: Mapping[str, BackendFactory] = BACKEND_KINDS,
) -> Backend:
    """Construct the backend ``spec`` names. Raises :class:`ConfigError` for unknown kinds."""
    factory = kinds.get(spec.kind)
    if factory is None:
        raise ConfigError(f"unknown backend kind {spec.kind!r}; known: {sorted(kinds)}")
    try:
        return factory(spec, http)
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"backend {spec.backend_id}: {exc}") from exc
