"""An in-process fake backend for tests (like ``httpx.MockTransport``): a handler function
answers each request; no sockets involved. With ``pins=True`` it also implements
:class:`~agentrt_controller.backends.api.SupportsPins` in memory (for retention tests)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from agentrt_controller.backends.api import (
    BackendCapabilities,
    BackendLoad,
    BackendRequest,
    BackendUnavailable,
    PinError,
    PinResult,
    PinsUnsupported,
)

__all__ = ["FakeBackend", "FakeResponse"]


@dataclass
class FakeResponse:
    """A canned answer: ``body`` whole, or ``chunks`` streamed one by one."""

    status_code: int = 200
    body: bytes = b""
    chunks: Sequence[bytes] = ()
    headers: Mapping[str, str] = field(default_factory=lambda: {"content-type": "application/json"})
    closed: bool = False

    @classmethod
    def json(cls, data: object, status_code: int = 200) -> FakeResponse:
        return cls(status_code=status_code, body=json.dumps(data).encode())

    async def aread(self) -> bytes:
        self.closed = True
        return self.body or b"".join(self.chunks)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks or (self.body,):
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


Handler = Callable[[BackendRequest], Awaitable[FakeResponse]]


class FakeBackend:
    """A backend whose answers come from ``handler``; ``down=True`` makes it unreachable."""

    kind = "fake"

    def __init__(
        self,
        backend_id: str,
        handler: Handler,
        *,
        capabilities: BackendCapabilities | None = None,
        load: BackendLoad | None = None,
        models: list[dict[str, object]] | None = None,
        pins: bool = False,
        credential: str | None = None,
    ) -> None:
        self.backend_id = backend_id
        self.url = f"fake://{backend_id}"
        self.capabilities = capabilities or BackendCapabilities()
        if pins:
            self.capabilities = replace(self.capabilities, supports_pins=True)
        #: Live pins: pin id -> what was asked (``ttl_s``, ``tokens`` or ``messages``...).
        self.pins: dict[str, dict[str, object]] = {}
        #: Every pin / unpin call, in order: ``("pin" | "unpin", pin_id)``.
        self.pin_log: list[tuple[str, str]] = []
        self.handler = handler
        self.load = load or BackendLoad()
        self.model_list: list[dict[str, object]] = (
            models if models is not None else [{"id": "fake-model"}]
        )
        self.down = False
        #: The controller's credential for this backend: every recorded request carries it as
        #: ``Authorization: Bearer`` (like an HTTP backend's ``api_key`` option).
        self.credential = credential
        #: Every request sent, in order (as the server would see it).
        self.requests: list[BackendRequest] = []

    async def send(self, request: BackendRequest) -> FakeResponse:
        if self.down:
            raise BackendUnavailable(f"fake backend {self.backend_id} is down")
        if self.credential is not None:
            headers = {k: v for k, v in request.headers.items() if k != "authorization"}
            headers["authorization"] = f"Bearer {self.credential}"
            request = replace(request, headers=headers)
        self.requests.append(request)
        return await self.handler(request)

    async def scrape(self) -> BackendLoad:
        if self.down:
            raise BackendUnavailable(f"fake backend {self.backend_id} is down")
        return self.load

    async def health(self) -> bool:
        return not self.down

    async def models(self) -> list[dict[str, object]]:
        if self.down:
            raise BackendUnavailable(f"fake backend {self.backend_id} is down")
        return list(self.model_list)

    async def pin(
        self,
        pin_id: str,
        *,
        ttl_s: float | None,
        messages: Sequence[Mapping[str, object]] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        prompt: str | None = None,
        token_ids: Sequence[int] | None = None,
        cache_salt: str | None = None,
    ) -> PinResult:
        if not self.capabilities.supports_pins:
            raise PinsUnsupported(f"fake backend {self.backend_id} does not pin")
        if self.down:
            raise BackendUnavailable(f"fake backend {self.backend_id} is down")
        if sum(x is not None for x in (messages, prompt, token_ids)) != 1:
            raise PinError("give exactly one of messages, prompt or token_ids")
        self.pin_log.append(("pin", pin_id))
        self.pins[pin_id] = {
            "ttl_s": ttl_s, "messages": messages, "tools": tools, "prompt": prompt,
            "token_ids": token_ids, "cache_salt": cache_salt,
        }  # fmt: skip
        tokens = len(token_ids) if token_ids is not None else None
        return PinResult(pin_id=pin_id, tokens=tokens, ttl_s=ttl_s)

    async def unpin(self, pin_id: str) -> bool:
        if self.down:
            raise BackendUnavailable(f"fake backend {self.backend_id} is down")
        self.pin_log.append(("unpin", pin_id))
        return self.pins.pop(pin_id, None) is not None

    async def aclose(self) -> None:
        return None
