"""The controller's side of the exact prefix index (docs/routing.md, "The exact prefix index"):
one :class:`~agentrt_controller.backends.kv_events.KvEventSubscriber` per backend configured
with ``kv_events=...``, the prompt token chains the index is looked up with, and the metrics.

Looking a prompt up in an index of token blocks needs the prompt's token ids as the server
tokenizes them (its chat template included): :meth:`KvEventsFeed.fill_token_chain` asks a
backend's ``POST /tokenize`` (vLLM's; the same body fields the request has: ``messages`` +
``tools`` + ``add_generation_prompt``, or ``prompt``) and hashes the answer with
:func:`~agentrt_controller.routing.hashing.token_block_hashes` for each block size the synced
backends publish, salted by the body's ``cache_salt`` as vLLM salts its block hashes. That is
one round trip per call on the request path, paid only when KV events are configured, and
cached (bounded) for repeated prompts. When it fails the call keeps an empty token chain and
the router uses the estimate.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

import anyio
import httpx
from anyio.abc import TaskStatus
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from agentrt_controller.backends.kv_events import KvEventsEndpoint, KvEventSubscriber
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.backends.tokens import tokenize_payload
from agentrt_controller.routing.hashing import token_block_hashes
from agentrt_controller.routing.kv_index import ExactPrefixIndex
from agentrt_controller.routing.scorers import PrefixCostScorer, exact_scorer_of
from agentrt_controller.scheduling.call import CallFacts

__all__ = ["KvEventsFeed", "prompt_token_ids"]

_log = logging.getLogger("agentrt.controller")

#: Token chains remembered by prompt (entries).
_CHAIN_CACHE_ENTRIES = 4096
#: How long a backend's ``/tokenize`` may take before the call falls back to the estimate (s).
_TOKENIZE_TIMEOUT_S = 5.0


def _no_credential(backend_id: str) -> str | None:
    """The default ``api_key_of``: the controller holds no credential for any backend."""
    return None


def _tokenize_body(body: Mapping[str, object]) -> dict[str, object] | None:
    """The ``/tokenize`` body for a generation request body; ``None`` when it has no text
    prompt (token-id prompts need no tokenizer: :func:`prompt_token_ids`)."""
    model = _str_or_none(body.get("model"))
    messages = body.get("messages")
    if isinstance(messages, list):
        tools = body.get("tools")
        payload = tokenize_payload(
            model,
            messages=messages,
            tools=tools if isinstance(tools, list) else None,
            prompt=None,
            add_generation_prompt=bool(body.get("add_generation_prompt", True)),
        )
        for key in ("continue_final_message", "chat_template_kwargs", "add_special_tokens"):
            if key in body:
                payload[key] = body[key]
        return payload
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return tokenize_payload(
            model, messages=None, tools=None, prompt=prompt, add_generation_prompt=False
        )
    return None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def prompt_token_ids(body: Mapping[str, object]) -> list[int] | None:
    """The prompt's token ids when the body gives them (a completions ``prompt`` of ints)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    return None


class KvEventsFeed:
    """Subscribers, the token chains and the metrics for one controller (module docstring).

    ``specs``: the configured backends (those with ``kv_events`` get a subscriber);
    ``index``: the router's exact index; ``scorer``: the router's prefix-cost scorer (its
    lookup counters are exported); ``api_key_of(backend_id)``: the controller's own
    credential for a backend; ``on_change``: wakes the dispatcher.
    """

    def __init__(
        self,
        specs: Sequence[BackendSpec],
        index: ExactPrefixIndex,
        *,
        scorer: PrefixCostScorer | None = None,
        api_key_of: Callable[[str], str | None] = _no_credential,
        on_change: Callable[[], None] | None = None,
        tokenize_timeout_s: float = _TOKENIZE_TIMEOUT_S,
    ) -> None:
        self.index = index
        self.scorer = scorer
        self._api_key_of = api_key_of
        self._tokenize_timeout_s = tokenize_timeout_s
        self.urls = {s.backend_id: s.url for s in specs if s.kv_events is not None}
        self.subscribers = [
            KvEventSubscriber(
                KvEventsEndpoint(s.backend_id, s.kv_events, s.kv_replay, s.kv_topic),
                index,
                on_change=on_change,
            )
            for s in specs
            if s.kv_events is not None
        ]
        self._chains: OrderedDict[bytes, list[int]] = OrderedDict()
        self._client: httpx.AsyncClient | None = None
        #: Prompts tokenized through a backend, and those that failed (the estimate then).
        self.tokenized_total = 0
        self.tokenize_failures_total = 0

    @classmethod
    def build(
        cls,
        specs: Sequence[BackendSpec],
        router: object,
        *,
        api_key_of: Callable[[str], str | None] = _no_credential,
        on_change: Callable[[], None] | None = None,
        tokenize_timeout_s: float = _TOKENIZE_TIMEOUT_S,
    ) -> KvEventsFeed | None:
        """A feed when some backend has ``kv_events`` and ``router`` reads an exact index
        (the keywords as for the constructor); ``None`` otherwise."""
        if not any(s.kv_events is not None for s in specs):
            return None
        scorer = exact_scorer_of(router)
        if scorer is not None and scorer.exact is not None:
            return cls(
                specs,
                scorer.exact,
                scorer=scorer,
                api_key_of=api_key_of,
                on_change=on_change,
                tokenize_timeout_s=tokenize_timeout_s,
            )
        _log.warning("kv_events configured, but the router has no prefix_cost scorer: unused")
        return None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run every subscriber until cancelled; reports started once all are connecting."""
        async with httpx.AsyncClient(timeout=self._tokenize_timeout_s) as client:
            self._client = client
            try:
                async with anyio.create_task_group() as group:
                    for subscriber in self.subscribers:
                        await group.start(subscriber.run)
                    task_status.started()
            finally:
                self._client = None

    # --- prompt chains ------------------------------------------------------------------------

    async def fill_token_chain(self, call: CallFacts, body: Mapping[str, object]) -> CallFacts:
        """``call`` with ``token_block_hashes`` / ``token_block_size`` for the block size the
        synced backends publish (several sizes: the smallest is taken — backends of one pool
        share it) and ``prompt_tokens`` the exact count. ``call`` itself when no backend is
        synced or tokenizing fails."""
        sizes = self.index.block_sizes()
        if not sizes:
            return call
        size = min(sizes)
        salt = _str_or_none(body.get("cache_salt"))
        tokens = prompt_token_ids(body)
        key = b""
        if tokens is None:
            payload = _tokenize_body(body)
            if payload is None:
                return call
            key = hashlib.blake2b(
                json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str).encode(),
                digest_size=16,
            ).digest()
            tokens = self._chains.get(key)
            if tokens is None:
                tokens = await self._tokenize(payload)
                if tokens is None:
                    return call
                self._chains[key] = tokens
                while len(self._chains) > _CHAIN_CACHE_ENTRIES:
                    self._chains.popitem(last=False)
            else:
                self._chains.move_to_end(key)
        # The server's own count: the body-size estimate can be far off (the prefix cost
        # compares cached tokens with it, so an under-estimate would hide every difference).
        return replace(
            call,
            token_block_hashes=token_block_hashes(tokens, size, salt=salt),
            token_block_size=size,
            prompt_tokens=len(tokens),
        )

    async def _tokenize(self, payload: Mapping[str, object]) -> list[int] | None:
        client = self._client
        candidates = [b for b in self.urls if self.index.is_synced(b)] or list(self.urls)
        if client is None or not candidates:
            return None
        backend_id = candidates[0]
        headers = {}
        key = self._api_key_of(backend_id)
        if key is not None:
            headers["authorization"] = f"Bearer {key}"
        try:
            response = await client.post(
                f"{self.urls[backend_id]}/tokenize", json=dict(payload), headers=headers
            )
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            answer = None
            _log.info("backend %s: /tokenize for the exact prefix index failed: %s",
                      backend_id, exc)  # fmt: skip
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            self.tokenize_failures_total += 1
            return None
        self.tokenized_total += 1
        return tokens

    # --- metrics ------------------------------------------------------------------------------

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Export the feed's state on ``registry`` (read at collection time)."""
        registry.register(_FeedCollector(self))


class _FeedCollector(Collector):
    def __init__(self, feed: KvEventsFeed) -> None:
        self.feed = feed

    def collect(self) -> Iterable[Metric]:
        feed, index = self.feed, self.feed.index
        counters = {
            "batches": ("agentrt_kv_event_batches", "KV-event batches applied"),
            "events": ("agentrt_kv_events_applied", "KV events applied"),
            "gaps": ("agentrt_kv_event_gaps", "Gaps seen in a backend's KV-event stream"),
            "holes": ("agentrt_kv_event_holes", "Gaps a replay could not fill (history lost)"),
            "restarts": ("agentrt_kv_event_publisher_restarts", "KV-event publisher restarts"),
            "replays": ("agentrt_kv_event_replays", "Replays asked of a backend's replay socket"),
            "decode": ("agentrt_kv_event_decode_errors", "KV-event messages that did not decode"),
        }
        families = {
            k: CounterMetricFamily(name, text, labels=["backend"])
            for k, (name, text) in counters.items()
        }
        synced = GaugeMetricFamily(
            "agentrt_kv_events_synced",
            "1 while the exact prefix index follows the backend's KV events, else 0 (estimate)",
            labels=["backend"],
        )
        blocks = GaugeMetricFamily(
            "agentrt_kv_index_blocks", "Blocks the exact prefix index holds", labels=["backend"]
        )
        for subscriber in feed.subscribers:
            backend = subscriber.backend_id
            stats = index.stats(backend)
            values = {
                "batches": stats.batches_applied,
                "events": stats.events_applied,
                "gaps": stats.gaps,
                "holes": stats.holes,
                "restarts": stats.restarts,
                "replays": subscriber.stats.replays,
                "decode": subscriber.stats.decode_errors,
            }
            for k, value in values.items():
                families[k].add_metric([backend], value)
            synced.add_metric([backend], 1.0 if index.is_synced(backend) else 0.0)
            blocks.add_metric([backend], index.cached_blocks(backend))
        yield from families.values()
        yield synced
        yield blocks
        yield GaugeMetricFamily(
            "agentrt_kv_index_bytes",
            "Approximate memory of the exact prefix index (bytes)",
            value=index.memory_bytes(),
        )
        lookups = CounterMetricFamily(
            "agentrt_prefix_lookups",
            "Per-backend prefix-cache lookups of the prefix router, by index that answered",
            labels=["index"],
        )
        if feed.scorer is not None:
            for name, count in feed.scorer.lookups.items():
                lookups.add_metric([name], count)
        yield lookups
        tokenize = CounterMetricFamily(
            "agentrt_kv_prompt_tokenize_failures",
            "Prompts the exact prefix index could not tokenize (the estimate was used)",
            value=feed.tokenize_failures_total,
        )
        yield tokenize
