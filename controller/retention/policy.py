"""The retention policy: how long to keep a waiting program's KV (BRIEF.md §5, Continuum).

**Decision rule.** For a wait of tool ``name`` by a thread whose context is ``C`` tokens, on a
backend at KV usage ``u``, with ``D`` the tool's duration distribution
(:mod:`.durations`) and ``p`` the probability the program comes back at all (:mod:`.returns`),
the TTL is the candidate ``T`` maximising the expected net saving (in prefill-seconds,
``a`` = the cost model's seconds per prefill token)::

    net(T) = a·C · [ p·F(T)  −  k(u')·E[min(D, T)] ]
             └ benefit: the recompute avoided when the program returns within T
                           └ cost: the blocks held (until the return, or T), priced by pressure
    u'   = u + C / kv_capacity_tokens          (the usage once the context is pinned; = u
                                                when the capacity is unknown)
    k(u) = hold_price_per_s · max(0, u − free_usage) / (max_usage − u)

Candidates are ``quantile_q(D) + slack_s`` for ``q`` in ``quantiles``, capped at
``max_ttl_s``; the decision is ``max net`` if it is > 0, else 0 (do not retain). So with free
memory (``u' <= free_usage``) the policy covers the tail (the largest quantile); as memory
fills, holding costs more per second and the best TTL shrinks toward the median, and then to
0; at ``u' >= max_usage`` nothing is retained. ``C`` scales benefit and cost alike: it decides
only through ``u'`` (a big context under pressure is not pinned) and the ``min_context_tokens``
floor. A program that rarely comes back (``p < min_return_probability``) is never retained.

Pure (STYLE.md rule 1): ``now_s`` comes in; history is fed by the events below.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from agentrt.errors import ConfigError
from controller.retention.api import RetentionDecision, WaitInfo
from controller.retention.durations import DurationModel, ToolDurations
from controller.retention.returns import ReturnModel

__all__ = ["RetentionConfig", "TtlRetentionPolicy"]


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """Parameters of :class:`TtlRetentionPolicy` (validated on construction)."""

    #: Candidate quantiles of the tool's duration for the TTL, each in (0, 1).
    quantiles: tuple[float, ...] = (0.5, 0.75, 0.9, 0.95, 0.99)
    #: Added to each candidate (seconds): the returning call's way to the engine.
    slack_s: float = 0.5
    #: Longest TTL (seconds).
    max_ttl_s: float = 120.0
    #: KV usage (fraction) up to which holding memory costs nothing.
    free_usage: float = 0.5
    #: KV usage (fraction) at or above which nothing is retained.
    max_usage: float = 0.95
    #: Price of holding memory (1/s): ``k(u) = hold_price_per_s · (u − free) / (max − u)``.
    hold_price_per_s: float = 1.0
    #: Contexts shorter than this are not worth a pin (tokens).
    min_context_tokens: int = 32
    #: Programs less likely than this to come back are not retained.
    min_return_probability: float = 0.2
    #: Engine KV capacity (tokens) to turn a context into usage; ``None`` = unknown.
    kv_capacity_tokens: int | None = None
    #: Seconds per prefill token (reported benefit and cost only; the rule is unit-free).
    prefill_s_per_token: float = 1.0e-4
    #: Durations kept per tool, samples needed before trusting them, and the mean assumed
    #: for a tool with neither history nor a client prediction (seconds).
    history_size: int = 256
    min_samples: int = 3
    default_duration_s: float = 2.0
    #: Beta prior of the return probability: pseudo-counts of returned / ended waits.
    prior_returned: float = 4.0
    prior_ended: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "quantiles", tuple(float(q) for q in self.quantiles))
        if not self.quantiles or any(not 0 < q < 1 for q in self.quantiles):
            raise ConfigError(f"retention quantiles must be in (0, 1), got {self.quantiles}")
        if not (0 <= self.free_usage < self.max_usage <= 1):
            raise ConfigError("retention needs 0 <= free_usage < max_usage <= 1")
        for name in ("slack_s", "hold_price_per_s", "prefill_s_per_token"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"retention {name} must be finite and >= 0, got {value!r}")
        if not self.max_ttl_s > 0:
            raise ConfigError(f"retention max_ttl_s must be > 0, got {self.max_ttl_s!r}")
        if not 0 <= self.min_return_probability <= 1:
            raise ConfigError("retention min_return_probability must be in [0, 1]")
        if self.min_context_tokens < 0:
            raise ConfigError("retention min_context_tokens must be >= 0")
        capacity = self.kv_capacity_tokens
        if capacity is not None and capacity < 1:
            raise ConfigError("retention kv_capacity_tokens must be >= 1 or unset")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RetentionConfig:
        """From a config table; unknown keys raise :class:`ConfigError`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown retention parameter(s) {unknown}; valid: {sorted(known)}")
        try:
            return cls(**values)
        except TypeError as exc:
            raise ConfigError(f"bad retention parameters: {exc}") from exc


class TtlRetentionPolicy:
    """Chooses a TTL per wait by the rule in the module docstring; learns durations and
    return probabilities from the events it is given."""

    name = "ttl"

    def __init__(self, config: RetentionConfig | None = None) -> None:
        self.config = config = config or RetentionConfig()
        self.durations = ToolDurations(
            size=config.history_size,
            min_samples=config.min_samples,
            default_mean_s=config.default_duration_s,
        )
        self.returns = ReturnModel(
            prior_returned=config.prior_returned, prior_ended=config.prior_ended
        )
        #: program -> (thread, node) -> wait name, for waits not ended yet.
        self._open: dict[str, dict[tuple[str, str], str]] = {}
        #: Decisions so far by reason.
        self.decisions: dict[str, int] = {}

    # --- the decision ------------------------------------------------------------------------

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        """A thread began waiting: the TTL to keep its KV (0 = none)."""
        key = _return_key(facts)
        self._open.setdefault(facts.program_id, {})[(facts.thread_id, facts.node_id)] = facts.name
        self.returns.wait_started(facts.program_id, facts.thread_id, key)
        decision = self.decide(facts, key)
        self.decisions[decision.reason] = self.decisions.get(decision.reason, 0) + 1
        return decision

    def decide(self, facts: WaitInfo, key: str | None = None) -> RetentionDecision:
        """The decision for ``facts`` with the current history (no side effects)."""
        cfg = self.config
        context = facts.context_tokens
        if facts.backend_id is None:
            return RetentionDecision(reason="no_backend")
        if context < max(1, cfg.min_context_tokens):
            return RetentionDecision(reason="short_context")
        usage = facts.kv_cache_usage if facts.kv_cache_usage is not None else 0.0
        if cfg.kv_capacity_tokens:
            usage += context / cfg.kv_capacity_tokens
        if usage >= cfg.max_usage:
            return RetentionDecision(reason="memory_full")
        p = self.returns.probability(key if key is not None else _return_key(facts))
        if p < cfg.min_return_probability:
            return RetentionDecision(reason="unlikely_return")
        price = cfg.hold_price_per_s * max(0.0, usage - cfg.free_usage) / (cfg.max_usage - usage)
        model = self.durations.model(facts.name, facts.predicted_duration_s)
        best_ttl, best_net, best_f, best_hold = 0.0, 0.0, 0.0, 0.0
        for ttl in _candidates(model, cfg):
            f = model.cdf(ttl)
            hold = model.expected_min(ttl)
            net = p * f - price * hold
            if net > best_net + 1e-12:
                best_ttl, best_net, best_f, best_hold = ttl, net, f, hold
        scale = cfg.prefill_s_per_token * context
        if best_ttl <= 0:
            return RetentionDecision(reason="not_worth_it")
        return RetentionDecision(
            ttl_s=best_ttl,
            reason="retain",
            p_return_in_ttl=p * best_f,
            expected_benefit_s=scale * p * best_f,
            expected_cost_s=scale * price * best_hold,
        )

    # --- what the policy learns from -------------------------------------------------------

    def on_wait_end(
        self, program_id: str, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        """The wait ended after ``duration_s`` seconds: one more sample for its tool."""
        waits = self._open.get(program_id)
        name = waits.pop((thread_id, node_id), None) if waits is not None else None
        if waits is not None and not waits:
            del self._open[program_id]
        if name is not None:
            self.durations.record(name, duration_s)

    def on_call_arrived(self, program_id: str, thread_id: str, now_s: float) -> None:
        """The thread's next call arrived: its last wait counts as returned."""
        self.returns.call_arrived(program_id, thread_id)

    def on_program_end(self, program_id: str, now_s: float) -> None:
        """The program ended: unresolved waits did not return; forget its open waits."""
        self.returns.program_ended(program_id)
        self._open.pop(program_id, None)

    def snapshot(self) -> dict[str, Any]:
        """JSON-able counters for introspection."""
        return {
            "policy": self.name,
            "decisions": dict(self.decisions),
            "open_waits": sum(len(w) for w in self._open.values()),
        }


def _return_key(facts: WaitInfo) -> str:
    kind = getattr(facts, "program_kind", "") or ""
    return f"{kind}/{facts.name}" if kind else facts.name


def _candidates(model: DurationModel, cfg: RetentionConfig) -> list[float]:
    ttls = {min(cfg.max_ttl_s, model.quantile(q) + cfg.slack_s) for q in cfg.quantiles}
    return sorted(t for t in ttls if t > 0)
