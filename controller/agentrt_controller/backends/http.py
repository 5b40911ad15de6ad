"""OpenAI-compatible HTTP backends over one shared ``httpx.AsyncClient`` (docs/backends.md).

* ``openai`` — any OpenAI-compatible server: no metrics, health on ``/v1/models``, priority only
  when explicitly switched on.
* ``vllm`` — vLLM's OpenAI server: scrapes ``/metrics`` (``vllm:`` names), health on
  ``/health``, writes the scheduler's priority as vLLM's ``priority`` body field (lower runs
  first) when ``priority=on`` — or, with ``priority=auto``, once a probe request showed that
  the server runs ``--scheduling-policy priority``; exact token counts from ``/tokenize``.

``sglang`` (:mod:`agentrt_controller.backends.sglang`) and ``emulator``
(:mod:`agentrt_controller.backends.emulator`) build on these. Other kinds subclass
:class:`HttpBackend` and override :meth:`HttpBackend.encode_priority`,
:meth:`HttpBackend.load_from_metrics`, :attr:`HttpBackend.health_path` or
:meth:`HttpBackend._capabilities`.

``cache_salt`` and every other body field are forwarded exactly as the client sent them (the
body is never re-serialised except to add ``priority`` or ``stream_options``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import httpx

from agentrt.fasthttp import FastHTTPTransport, Origin, head_lines, request_head
from agentrt_controller.backends.api import (
    BackendCapabilities,
    BackendError,
    BackendLoad,
    BackendRequest,
    BackendResponse,
    BackendUnavailable,
)
from agentrt_controller.backends.kv_capacity import vllm_capacity
from agentrt_controller.backends.prometheus_text import max_samples, sum_samples
from agentrt_controller.backends.tokens import TokenCounter
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.backends.wire import (
    BROKEN_BEFORE_STATUS,
    NOTHING_RECEIVED,
    HttpxResponse,
    encode_body,
    json_answer,
)

__all__ = [
    "HttpBackend",
    "HttpBackendConfig",
    "OpenAIBackend",
    "PriorityMode",
    "VllmBackend",
    "VllmBackendConfig",
    "encode_body",
]

_log = logging.getLogger("agentrt.controller")

#: A request body shorter than this goes to the backend joined with its head (one buffer);
#: a longer one is written after the head without a copy (one vectored write): copying
#: costs more than the second buffer from about 16 KB on (docs/benchmarks.md, "Controller
#: overhead: long prompts").
_JOIN_BELOW = 16_384

#: ``True`` / ``False``: send the scheduler's priority or not; ``"auto"``: ask the server.
PriorityMode = bool | Literal["auto"]


@dataclass(frozen=True, slots=True)
class HttpBackendConfig:
    """Options every HTTP backend kind takes (``factory.py`` fills them from a spec).

    A kind with options of its own extends this class (:class:`VllmBackendConfig`,
    ``SGLangBackendConfig``), so each option is declared once.
    """

    #: Send the scheduler's priority (``True``), not (``False``), or ask the server
    #: (``"auto"``: only kinds that can probe for it accept this).
    send_priority: PriorityMode = False
    #: Bound on health probes and metric scrapes (seconds).
    probe_timeout_s: float = 2.0
    #: Bound on the other side requests: tokenize, pins, feature probes (seconds).
    aux_timeout_s: float = 10.0
    #: The controller's own credential for this server (the spec's ``api_key`` option),
    #: sent as ``Authorization: Bearer`` on every request; ``None`` = none.
    credential: str | None = field(default=None, repr=False)
    #: The models the server serves, as configured (the spec's ``models`` option); the
    #: controller then routes by these and never asks its ``/v1/models`` for them. Empty =
    #: ask the server (docs/backends.md, "Models").
    models: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class VllmBackendConfig(HttpBackendConfig):
    """Options of the ``vllm`` and ``emulator`` kinds."""

    #: Most prompts whose token count is cached (entries; see ``TokenCounter``).
    token_cache_entries: int = 4096


class HttpBackend:
    """An OpenAI-compatible server reached over HTTP, configured by ``config`` (defaults when
    ``None``). Does not own ``http``."""

    KIND: ClassVar[str] = "openai"
    #: GET path whose 200 means healthy.
    health_path: ClassVar[str] = "/v1/models"

    def __init__(
        self, backend_id: str, url: str, http: HttpPool, config: HttpBackendConfig | None = None
    ) -> None:
        config = config or HttpBackendConfig()
        self.backend_id = backend_id
        self.kind: str = self.KIND
        self.url = url.rstrip("/")
        self._client = http.client
        self._transport = http.transport
        self._extensions = {"timeout": http.timeout.as_dict()}
        self._stream_extensions = {"timeout": http.stream_timeout.as_dict()}
        self._probe_timeout = httpx.Timeout(config.probe_timeout_s)
        self._aux_timeout = httpx.Timeout(config.aux_timeout_s)
        self._urls: dict[str, httpx.URL] = {}  # parsed once per path: URL parsing is not free
        # http:// behind the lean transport: generation requests go to its pool directly,
        # serialised here (no httpx request or response objects on the hot path).
        self._fast: FastHTTPTransport | None = None
        if isinstance(http.transport, FastHTTPTransport) and self.url.startswith("http://"):
            self._fast = http.transport
        self._targets: dict[str, tuple[Origin, bytes]] = {}  # per path: origin, request line
        self._read_s = http.timeout.read
        self._stream_read_s = http.stream_timeout.read
        self._connect_s = http.timeout.connect
        #: How the priority switch was configured (``"auto"`` resolves in detect_features).
        self.priority_mode: PriorityMode = config.send_priority
        self.capabilities = self._capabilities(config.send_priority is True)
        #: The controller's own credential for this server (:class:`HoldsCredential`): sent
        #: as ``Authorization: Bearer`` on forwarded calls (replacing a forwarded client
        #: header) and on the controller's own requests — health probes, ``/metrics``
        #: scrapes, model lists, feature probes, tokenizer and pin calls.
        self.credential: str | None = config.credential
        self._auth = (
            None if config.credential is None else f"Bearer {config.credential}".encode("latin-1")
        )
        #: The configured models (:attr:`HttpBackendConfig.models`); empty = ask the server.
        self.declared_models = config.models

    def _capabilities(self, send_priority: bool) -> BackendCapabilities:
        # A generic server may not know stream_options: leave stream bodies as the client sent.
        return BackendCapabilities(
            supports_priority=send_priority, scrapes_metrics=False, stream_usage=False
        )

    def encode_priority(self, priority: int) -> dict[str, int]:
        """Body fields carrying the scheduler's ``priority`` (lower = sooner)."""
        return {"priority": priority}

    def load_from_metrics(self, text: str) -> BackendLoad:
        """Load figures from the server's Prometheus text; unknown ones stay ``None``."""
        return BackendLoad()

    async def send(self, request: BackendRequest) -> BackendResponse:
        extra: dict[str, Any] = {}
        if request.priority is not None and self.capabilities.supports_priority:
            extra = self.encode_priority(request.priority)
        body = encode_body(request, extra)
        # Bytes, as received (the service decoded them as latin-1): httpx would encode str
        # values as ASCII and raise on anything else. A loop: no comprehension's frame.
        auth = self._auth
        headers: list[tuple[bytes, bytes]] = []
        for key, value in request.headers.items():
            name = key.encode("latin-1")
            # The controller's own credential, never a tenant's key.
            if auth is None or name != b"authorization":
                headers.append((name, value.encode("latin-1")))
        if auth is not None:
            headers.append((b"authorization", auth))
        headers.append((b"content-type", b"application/json"))
        try:
            fast = self._fast
            if fast is not None:
                # Over the lean transport's pool, the request serialised here in one buffer
                # (one write); inline, not a coroutine of its own (a frame fewer to resume).
                target = self._targets.get(request.path)
                if target is None:
                    target = self._targets[request.path] = self._target(request.path)
                origin, head = target
                lines = head_lines(head, headers, len(body))
                if len(body) < _JOIN_BELOW:  # one buffer, one write
                    lines.append(body)
                    tail = b""
                else:  # a long prompt's body is written as it is, after the head (no copy)
                    tail = body
                return await fast.open(
                    origin,
                    b"".join(lines),
                    tail,
                    # A stream's read timeout is the stall limit: a silent backend is given up
                    # sooner.
                    read_timeout_s=self._stream_read_s if request.stream else self._read_s,
                    connect_timeout_s=self._connect_s,
                )
            url = self._urls.get(request.path)
            if url is None:
                url = self._urls[request.path] = httpx.URL(self.url + request.path)
            # A stream's read timeout is the stall limit: a silent backend is given up sooner.
            extensions = self._stream_extensions if request.stream else self._extensions
            http_request = httpx.Request(
                "POST", url, content=body, headers=headers, extensions=extensions
            )
            response = await self._transport.handle_async_request(http_request)
        except NOTHING_RECEIVED as exc:
            raise BackendUnavailable(
                f"backend {self.backend_id} unreachable: {exc!r}", connect_failed=True
            ) from exc
        except BROKEN_BEFORE_STATUS as exc:
            raise BackendUnavailable(
                f"backend {self.backend_id} closed before answering: {exc!r}",
                connect_failed=False,
            ) from exc
        except httpx.ReadTimeout as exc:
            if not request.stream:  # a whole answer's head comes last: slow, not stalled
                raise BackendError(f"backend {self.backend_id} failed: {exc!r}") from exc
            # A stream's head comes at once: silence for the stall limit means stalled, and
            # nothing reached the client yet, so another backend may answer.
            raise BackendUnavailable(
                f"backend {self.backend_id} sent no answer in time (stalled): {exc!r}",
                connect_failed=False,
            ) from exc
        except httpx.HTTPError as exc:
            raise BackendError(f"backend {self.backend_id} failed: {exc!r}") from exc
        return HttpxResponse(response)

    def _target(self, path: str) -> tuple[tuple[str, int], bytes]:
        """The lean transport's origin for ``path`` and the request line and ``host`` header
        httpx would write: the path as given, Host without the default port."""
        return request_head(b"POST", httpx.URL(self.url + path))

    async def _request(
        self, method: str, path: str, limits: httpx.Timeout, body: Any = None
    ) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.credential}"} if self.credential else None
        try:
            return await self._client.request(
                method, self.url + path, json=body, timeout=limits, headers=headers
            )
        except (*NOTHING_RECEIVED, *BROKEN_BEFORE_STATUS) as exc:
            raise BackendUnavailable(
                f"backend {self.backend_id} unreachable: {exc!r}", connect_failed=True
            ) from exc
        except httpx.HTTPError as exc:
            raise BackendError(f"backend {self.backend_id} failed: {exc!r}") from exc

    async def _get(self, path: str) -> httpx.Response:
        return await self._request("GET", path, self._probe_timeout)

    async def _post_json(self, path: str, body: Mapping[str, object]) -> object:
        """POST a side request (not a generation); the parsed JSON answer of a 2xx.

        Raises :class:`BackendUnavailable` (unreachable) and :class:`BackendError` (non-2xx
        status — with ``status_code`` set — or a body that is not JSON)."""
        response = await self._request("POST", path, self._aux_timeout, dict(body))
        return json_answer(self.backend_id, path, response)

    async def scrape(self) -> BackendLoad:
        if not self.capabilities.scrapes_metrics:
            return BackendLoad()
        response = await self._get("/metrics")
        if response.status_code != 200:
            return BackendLoad()
        try:
            text = response.text
        except (UnicodeDecodeError, LookupError):
            return BackendLoad()
        return self.load_from_metrics(text)

    async def health(self) -> bool:
        try:
            response = await self._get(self.health_path)
        except BackendError:
            return False
        return response.status_code == 200

    async def models(self) -> list[dict[str, object]]:
        if self.declared_models:
            return [
                {"id": model, "object": "model", "owned_by": "agentrt"}
                for model in self.declared_models
            ]
        response = await self._get("/v1/models")
        try:
            data = response.json()["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise BackendError(f"backend {self.backend_id} sent a malformed model list") from exc
        if response.status_code != 200 or not isinstance(data, list):
            raise BackendError(f"backend {self.backend_id} model list: HTTP {response.status_code}")
        return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]

    async def aclose(self) -> None:
        return None


class OpenAIBackend(HttpBackend):
    """Any OpenAI-compatible server: no metrics; priority only when explicitly enabled."""

    KIND: ClassVar[str] = "openai"


_VLLM_COUNTS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    # Our emulator's batch size (no vLLM metric says it): bounds the adaptive window, also
    # when the emulator is configured as kind=vllm.
    "agentrt_engine_max_num_seqs",
)
_VLLM_FRACTIONS = (
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",  # name before vLLM 0.10
)


def count_or_none(value: float | None) -> int | None:
    """A non-negative count, or ``None`` for missing / negative values."""
    return None if value is None or value < 0 else round(value)


def fraction_or_none(value: float | None) -> float | None:
    """A fraction in [0, 1], or ``None`` for missing / out-of-range values."""
    return value if value is not None and 0.0 <= value <= 1.0 else None


def counter_or_none(value: float | None) -> float | None:
    """A cumulative counter (≥ 0), or ``None``."""
    return value if value is not None and value >= 0 else None


#: vLLM's refusal of a priority it cannot honour ("Got priority N but Priority scheduling is
#: not enabled."): 400 with this in the message.
_PRIORITY_REFUSED = "priority scheduling is not enabled"


class VllmBackend(HttpBackend):
    """vLLM's OpenAI server (and servers exposing vLLM's metric names, like our emulator).

    ``priority_mode="auto"`` sends one probe generation (``max_tokens: 1``, ``priority: 1``)
    after the first successful health probe and after each recovery: vLLM answers it 400
    unless it runs ``--scheduling-policy priority``. Until a probe succeeded no priority is
    sent (the safe choice).
    """

    KIND: ClassVar[str] = "vllm"
    health_path: ClassVar[str] = "/health"

    def __init__(
        self, backend_id: str, url: str, http: HttpPool, config: VllmBackendConfig | None = None
    ) -> None:
        config = config or VllmBackendConfig()
        super().__init__(backend_id, url, http, config)
        self.tokens = TokenCounter(self._post_json, max_entries=config.token_cache_entries)
        self._model: str | None = None

    def _capabilities(self, send_priority: bool) -> BackendCapabilities:
        return BackendCapabilities(
            supports_priority=send_priority,
            scrapes_metrics=True,
            supports_tokenize=True,
            takes_cache_salt=True,
        )

    def load_from_metrics(self, text: str) -> BackendLoad:
        counts = sum_samples(text, _VLLM_COUNTS)
        fractions = max_samples(text, _VLLM_FRACTIONS)
        usage = fractions.get("vllm:kv_cache_usage_perc")
        if usage is None:
            usage = fractions.get("vllm:gpu_cache_usage_perc")
        return BackendLoad(
            num_running=count_or_none(counts.get("vllm:num_requests_running")),
            num_waiting=count_or_none(counts.get("vllm:num_requests_waiting")),
            kv_cache_usage=fraction_or_none(usage),
            prefix_cache_queries=counter_or_none(counts.get("vllm:prefix_cache_queries_total")),
            prefix_cache_hits=counter_or_none(counts.get("vllm:prefix_cache_hits_total")),
            max_num_seqs=count_or_none(counts.get("agentrt_engine_max_num_seqs")),
            capacity=vllm_capacity(text),
        )

    async def _model_id(self) -> str | None:
        if self._model is None:
            try:
                models = await self.models()
            except BackendError:
                return None
            model_id = models[0]["id"] if models else None
            self._model = model_id if isinstance(model_id, str) else None
        return self._model

    async def count_tokens(
        self,
        *,
        messages: Sequence[Mapping[str, object]] | None = None,
        tools: Sequence[Mapping[str, object]] | None = None,
        prompt: str | None = None,
        add_generation_prompt: bool = True,
    ) -> int:
        """Exact prompt tokens via ``POST /tokenize`` (cached; see
        :class:`~agentrt_controller.backends.tokens.TokenCounter`). Raises :class:`BackendError`."""
        try:
            return await self.tokens.count(
                await self._model_id(),
                messages=messages,
                tools=tools,
                prompt=prompt,
                add_generation_prompt=add_generation_prompt,
            )
        except ValueError as exc:
            raise BackendError(f"backend {self.backend_id} tokenize: {exc}") from exc

    async def detect_features(self) -> None:
        """Resolve ``priority=auto`` with one probe generation. Never raises."""
        self._model = None  # the server may have restarted with another model
        if self.priority_mode != "auto":
            return
        verdict = await self._probe_priority()
        if verdict is not None and verdict != self.capabilities.supports_priority:
            _log.warning(
                "backend %s: priority %s (auto-detected: %s)", self.backend_id,
                "on" if verdict else "off",
                "it took a request with a priority" if verdict
                else "it refused a request priority: not --scheduling-policy priority",
            )  # fmt: skip
            self.capabilities = replace(self.capabilities, supports_priority=verdict)

    async def _probe_priority(self) -> bool | None:
        model = await self._model_id()
        if model is None:
            return None
        probe = {"model": model, "prompt": "ok", "max_tokens": 1, "priority": 1}
        try:
            await self._post_json("/v1/completions", probe)
        except BackendUnavailable:
            return None
        except BackendError as exc:
            if exc.status_code == 400 and _PRIORITY_REFUSED in str(exc).lower():
                return False
            _log.info("backend %s: priority probe inconclusive: %s", self.backend_id, exc)
            return None
        return True
