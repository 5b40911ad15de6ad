"""The retention policy: how long to keep a waiting program's KV, and whether to hold it
(Continuum arXiv 2511.02230, §4; docs/routing.md, "KV retention").

A decision has two parts (:class:`~agentrt_controller.retention.api.RetentionDecision`):

* ``ttl_s`` — the **retention window**: while it lasts the program keeps its engine binding
  and its returning call is admitted ahead of the scheduler's order (the Dispatcher's retained
  lane). That costs no memory, but it is only worth it while the context is still cached (on
  the GPU, or in the backend's KV CPU tier);
* ``pin`` — whether to **hold the KV** for the window (a native pin on our emulator or
  SGLang, a re-warm before the predicted return on vLLM). That costs memory.

**Inputs.** A wait of tool ``name`` by a thread whose context is ``C`` tokens, on a backend at
KV usage ``u`` (running + pinned, a fraction) with a KV capacity of ``M`` tokens, holding
``P`` tokens of this controller's pins already. ``D`` the tool's duration distribution
(:mod:`.durations`), ``p`` the probability the program comes back at all (:mod:`.returns`).
The **residence time** of an unpinned context in the engine's LRU cache is
``R = (1 − u)·M / churn`` seconds: the free-or-evictable memory over the rate the engine
allocates blocks (``churn_tokens_per_s``, by default the prefill speed
``1 / prefill_s_per_token`` — an upper bound, so ``R`` is conservative; ``R = ∞`` when ``M``
is unknown). The **cost of an eviction**, when the program comes back to a context that is
gone, is ``miss = reload(C) + η·T`` seconds:

* ``reload(C) = reload_s_per_token·C`` when the backend has a KV CPU tier (the evicted
  blocks went there: ``kv_bytes_per_token / pcie_bytes_per_s`` per token, from the backend's
  hardware profile), else the recompute ``prefill_s_per_token·C``;
* ``T`` the recent queueing delay of calls on that backend (the driver's fact; the
  ``queue_wait_s`` setting when it has none) — what an evicted program waits again, since
  without its KV its call is new work the engine must find memory for — weighted by
  ``η = queue_weight``.

**Holding cost.** What the pinned memory denies the other programs, in seconds of the
engine's work: a KV-bound engine's throughput is proportional to the KV its batch can use, so
holding ``C`` of ``M`` tokens for ``H`` seconds costs at most ``H·C/M`` seconds of its work
(when every freed token would be used: memory in demand); when memory is free, the pin only
displaces the LRU cache, which costs the recompute of what is displaced and reused,
``reuse_fraction·H·C / ((1 − u)·M)`` seconds (``C·H/R`` tokens displaced). So::

    hold(H) = H · (C/M) · min(1, reuse_fraction / (1 − u))

**Rule** (Continuum's, with our costs)::

    τ* = argmax_τ  p · P(min(R, τ) < D ≤ τ) · miss  −  hold(E[min(D, τ)])

over candidate TTLs ``τ = quantile_q(D) + slack_s`` (``q`` in ``quantiles``, capped at
``max_ttl_s``). The saving counts only returns within ``τ`` that the LRU would have missed (a
wait shorter than ``R`` finds its context cached anyway); the holding time is
``E[min(D, τ)]`` (released at the return or at the TTL).

1. No retention (``ttl_s = 0``): no backend, ``C < min_context_tokens``, or
   ``p < min_return_probability``.
2. **Pin** with ``τ*`` when its net saving is positive, and ``P + C <= max_pinned_fraction·M``
   (a sanity bound: pins never take the whole memory; the driver's deadlock guard unpins when
   they leave no room for waiting calls). There is no memory-full gate: under full memory
   ``R`` is short, so the saving is large exactly when the context is most at risk, and the
   holding cost is the full ``H·C/M`` — a pin is placed when the return is likely and soon.
   With a CPU tier ``miss`` is the reload, a few times cheaper than the recompute: the context
   is let go to the tier unless the wait is short (**let-offload**).
3. Otherwise the **window** is ``min(quantile_{cover_quantile}(D) + slack_s, R', max_ttl_s)``
   with ``R' = ((1 − u)·M + cpu_tokens) / churn``, the residence counting the CPU tier: the
   program counts as retained while it likely comes back *and* its context likely survives
   somewhere on that backend. A window of 0 is **drop**.

**What it learns, per tenant.** ``D`` and ``p`` are learned from traffic per (tenant, name)
(:mod:`.learned`, bounded): one tenant's waits never change another's decisions. A tenant with
too few samples of its own for a name falls back on the global prior, fed only by the tenants
named in ``sharing_tenants`` (``share_statistics`` in the tenants file, docs/tenancy.md).

Pure (docs/architecture.md, "Design rules"): ``now_s`` comes in; history is fed by the events
below.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import BeforeValidator, Field

from agentrt.errors import ConfigError
from agentrt_controller.config_check import SECTION, as_tuple, check_fields, parse_section
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention.api import RetentionDecision, WaitInfo
from agentrt_controller.retention.durations import DurationModel, ToolDurations
from agentrt_controller.retention.learned import MAX_NAMES, MAX_NAMES_PER_TENANT
from agentrt_controller.retention.returns import ReturnModel
from agentrt_serving.hardware import PROFILES

__all__ = ["RetentionConfig", "TtlRetentionPolicy", "reload_s_per_token_of"]


#: A probability or quantile strictly inside (0, 1).
_Fraction = Annotated[float, Field(gt=0, lt=1)]
#: A finite number >= 0.
_NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """Parameters of :class:`TtlRetentionPolicy` (the ``retention_options`` section;
    validated on construction, :class:`ConfigError`)."""

    __pydantic_config__ = SECTION

    #: Quantile of the tool's duration the retention window covers, in (0, 1).
    cover_quantile: _Fraction = 0.95
    #: Candidate quantiles of the tool's duration for a pin's TTL, each in (0, 1).
    quantiles: Annotated[tuple[_Fraction, ...], Field(min_length=1), BeforeValidator(as_tuple)] = (
        0.5,
        0.75,
        0.9,
        0.95,
        0.99,
    )
    #: Added to each candidate (seconds): the returning call's way to the engine.
    slack_s: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)] = 0.5
    #: Longest TTL (seconds; at most a day).
    max_ttl_s: Annotated[float, Field(gt=0, le=86_400)] = 120.0
    #: Most of a backend's KV capacity (fraction) this controller's pins may hold, counting the
    #: new one: a pin alone never fills the memory.
    max_pinned_fraction: Annotated[float, Field(gt=0, le=1)] = 0.5
    #: Weight ``η`` of the queueing delay an evicted program waits again, in the saving.
    queue_weight: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] = 1.0
    #: Queueing delay assumed when the driver does not say (seconds).
    queue_wait_s: Annotated[float, Field(ge=0, le=3600, allow_inf_nan=False)] = 0.0
    #: Seconds to reload one token from the backends' KV CPU tier when the facts do not say
    #: (``kv_bytes_per_token / pcie_bytes_per_s`` of its hardware profile,
    #: :func:`reload_s_per_token_of`); ``None`` = no tier (an evicted context is recomputed).
    reload_s_per_token: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    #: Share of the blocks a pin pushes out of the LRU cache that would have been reused.
    reuse_fraction: _NonNegative = 0.5
    #: Contexts shorter than this are not worth retaining (tokens).
    min_context_tokens: Annotated[int, Field(ge=0)] = 32
    #: Programs less likely than this to come back are not retained.
    min_return_probability: Annotated[float, Field(ge=0, le=1)] = 0.2
    #: Engine KV capacity (tokens) when the facts do not say; ``None`` = unknown (no pins).
    kv_capacity_tokens: Annotated[int, Field(ge=1)] | None = None
    #: Blocks the engine allocates per second, as tokens; ``None`` = ``1/prefill_s_per_token``.
    churn_tokens_per_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    #: Seconds per prefill token (cost model): churn default and reported costs.
    prefill_s_per_token: _NonNegative = 1.0e-4
    #: Durations kept per tool, samples needed before trusting them, and the mean assumed
    #: for a tool with neither history nor a client prediction (seconds).
    history_size: int = 256
    min_samples: int = 3
    default_duration_s: float = 2.0
    #: Beta prior of the return probability: pseudo-counts of returned / ended waits.
    prior_returned: float = 4.0
    prior_ended: float = 1.0
    #: Memory the controller's retention may keep per tenant for pins and re-warms (bytes of
    #: kept prompts, never bodies); over it the tenant's oldest are dropped and those threads
    #: are retained window-only. 0 = keep none (every retention window-only).
    kept_bytes_per_tenant: Annotated[int, Field(ge=0)] = 64 * 1024 * 1024
    #: Bounds of what is learned (durations, return counts): names kept per tenant, and
    #: (tenant, name) entries in all; the least recently written is forgotten first.
    max_learned_names_per_tenant: Annotated[int, Field(ge=1)] = MAX_NAMES_PER_TENANT
    max_learned_names: Annotated[int, Field(ge=1)] = MAX_NAMES

    def __post_init__(self) -> None:
        check_fields(self)
        if self.churn_tokens_per_s is None and not self.prefill_s_per_token > 0:
            raise ConfigError("retention needs churn_tokens_per_s or prefill_s_per_token > 0")

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> RetentionConfig:
        """From a config table; unknown keys raise :class:`ConfigError`."""
        return parse_section(cls, values, "retention_options")

    @property
    def churn(self) -> float:
        """Tokens of KV the engine allocates per second (the LRU's eviction speed)."""
        return self.churn_tokens_per_s or 1.0 / self.prefill_s_per_token


class TtlRetentionPolicy:
    """Chooses a TTL per wait by the rule in the module docstring; learns durations and
    return probabilities from the events it is given (a
    :class:`~agentrt_controller.retention.api.RetentionPolicy`)."""

    name = "ttl"

    def __init__(
        self, config: RetentionConfig | None = None, *, sharing_tenants: Collection[str] = ()
    ) -> None:
        """``sharing_tenants``: the tenants whose traffic feeds the global prior (those with
        ``share_statistics = true``); none by default."""
        self.config = config = config or RetentionConfig()
        per_tenant, in_all = config.max_learned_names_per_tenant, config.max_learned_names
        self.sharing_tenants = frozenset(sharing_tenants)
        self.durations = ToolDurations(
            size=config.history_size,
            min_samples=config.min_samples,
            default_mean_s=config.default_duration_s,
            sharing=self.sharing_tenants,
            max_names_per_tenant=per_tenant,
            max_names=in_all,
        )
        self.returns = ReturnModel(
            prior_returned=config.prior_returned,
            prior_ended=config.prior_ended,
            min_samples=config.min_samples,
            sharing=self.sharing_tenants,
            max_names_per_tenant=per_tenant,
            max_names=in_all,
        )
        #: program -> (thread, node) -> wait name, for waits not ended yet.
        self._open: dict[ProgramKey, dict[tuple[str, str], str]] = {}
        #: Decisions so far by reason.
        self.decisions: dict[str, int] = {}
        #: Decisions so far by tenant, then reason (tenants from the key file: few).
        self.decisions_by_tenant: dict[str | None, dict[str, int]] = {}

    # --- the decision ------------------------------------------------------------------------

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        """A thread began waiting: the TTL to keep its KV (0 = none)."""
        key = _return_key(facts)
        self._open.setdefault(facts.program, {})[(facts.thread_id, facts.node_id)] = facts.name
        self.returns.wait_started(facts.program, facts.thread_id, key)
        decision = self.decide(facts, key)
        self.decisions[decision.reason] = self.decisions.get(decision.reason, 0) + 1
        mine = self.decisions_by_tenant.get(facts.program.tenant)
        if mine is None and len(self.decisions_by_tenant) < _MAX_TENANT_COUNTERS:
            mine = self.decisions_by_tenant[facts.program.tenant] = {}
        if mine is not None:
            mine[decision.reason] = mine.get(decision.reason, 0) + 1
        return decision

    def decide(self, facts: WaitInfo, key: str | None = None) -> RetentionDecision:
        """The decision for ``facts`` with the current history of its tenant (no side
        effects); the rule is in the module docstring."""
        cfg = self.config
        tenant = facts.program.tenant
        context = facts.context_tokens
        if facts.backend_id is None:
            return RetentionDecision(reason="no_backend")
        if context < max(1, cfg.min_context_tokens):
            return RetentionDecision(reason="short_context")
        p = self.returns.probability(key if key is not None else _return_key(facts), tenant=tenant)
        if p < cfg.min_return_probability:
            return RetentionDecision(reason="unlikely_return")
        model = self.durations.model(facts.name, facts.predicted_duration_s, tenant=tenant)
        usage = min(1.0, max(0.0, facts.kv_cache_usage or 0.0))
        capacity = getattr(facts, "kv_capacity_tokens", None) or cfg.kv_capacity_tokens
        free_tokens = (1.0 - usage) * capacity if capacity else math.inf
        residence = free_tokens / cfg.churn
        pin = self._best_pin(facts, model, p, usage, capacity, residence)
        if pin is not None:
            return pin
        cpu_tokens = getattr(facts, "cpu_kv_capacity_tokens", 0) or 0
        survives = (free_tokens + cpu_tokens) / cfg.churn
        cover = model.quantile(cfg.cover_quantile) + cfg.slack_s
        ttl = min(cover, survives, cfg.max_ttl_s)
        if not ttl > 0:
            return RetentionDecision(reason="not_worth_it")
        return RetentionDecision(
            ttl_s=ttl,
            pin=False,
            reason="retain",
            p_return_in_ttl=p * model.cdf(ttl),
            expected_return_s=model.expected_within(ttl),
        )

    def _best_pin(
        self,
        facts: WaitInfo,
        model: DurationModel,
        p: float,
        usage: float,
        capacity: int | None,
        residence: float,
    ) -> RetentionDecision | None:
        """A pin with the TTL of the best positive net saving, or ``None``."""
        cfg = self.config
        context = facts.context_tokens
        pinned = getattr(facts, "pinned_tokens", 0) or 0
        if (
            not capacity
            or not math.isfinite(residence)
            or pinned + context > (cfg.max_pinned_fraction * capacity)
        ):
            return None
        miss_s = self.eviction_cost_s(facts)
        share = context / capacity
        hold_rate = share if usage >= 1.0 else share * min(1.0, cfg.reuse_fraction / (1 - usage))
        best: tuple[float, float, float, float] | None = None  # net, ttl, gain, cost
        for ttl in _candidates(model, cfg):
            gain = p * max(0.0, model.cdf(ttl) - model.cdf(min(residence, ttl))) * miss_s
            cost = hold_rate * model.expected_min(ttl)
            if gain - cost > (best[0] if best else 0.0) + 1e-12:
                best = (gain - cost, ttl, gain, cost)
        if best is None:
            return None
        _, ttl, gain, cost = best
        return RetentionDecision(
            ttl_s=ttl,
            pin=True,
            reason="pin",
            p_return_in_ttl=p * model.cdf(ttl),
            expected_benefit_s=gain,
            expected_cost_s=cost,
            expected_return_s=model.expected_within(ttl),
            # back, its return is certain: hold while the saving exceeds the full holding
            # cost, miss > H·C/M, i.e. for at most miss·M/C seconds (released at admission)
            hold_after_return_s=min(cfg.max_ttl_s, miss_s / share),
        )

    def eviction_cost_s(self, facts: WaitInfo) -> float:
        """``miss = reload(C) + η·T`` (seconds): what the program pays when it comes back to
        an evicted context — the reload from the backend's CPU tier (the facts' rate, else the
        configured one) or else the recompute, plus the weighted queueing delay."""
        cfg = self.config
        reload = getattr(facts, "reload_s_per_token", None)
        if reload is None:
            reload = cfg.reload_s_per_token
        per_token = cfg.prefill_s_per_token if reload is None else reload
        queue = getattr(facts, "queue_wait_s", None)
        if queue is None or not queue >= 0:
            queue = cfg.queue_wait_s
        return per_token * facts.context_tokens + cfg.queue_weight * queue

    # --- what the policy learns from -------------------------------------------------------

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        """The wait ended after ``duration_s`` seconds: one more sample for its tool, in the
        program's tenant's history."""
        waits = self._open.get(program)
        name = waits.pop((thread_id, node_id), None) if waits is not None else None
        if waits is not None and not waits:
            del self._open[program]
        if name is not None:
            self.durations.record(name, duration_s, tenant=program.tenant)

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        """The thread's next call arrived: its last wait counts as returned."""
        self.returns.call_arrived(program, thread_id)

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        """The program ended: unresolved waits did not return; forget its open waits."""
        self.returns.program_ended(program)
        self._open.pop(program, None)

    def snapshot(self) -> dict[str, object]:
        """JSON-able counters for introspection."""
        return {
            "policy": self.name,
            "decisions": dict(self.decisions),
            # JSON keys are strings: the simulator's one tenant (None) shows as "".
            "decisions_by_tenant": {
                tenant or "": dict(reasons) for tenant, reasons in self.decisions_by_tenant.items()
            },
            "open_waits": sum(len(w) for w in self._open.values()),
            "learned": {
                "durations": self.durations.learned,
                "returns": self.returns.learned,
                "sharing_tenants": sorted(self.sharing_tenants),
            },
        }


#: Tenants with their own decision counters (more share none: the counters are introspection).
_MAX_TENANT_COUNTERS = 1024


def _return_key(facts: WaitInfo) -> str:
    kind = getattr(facts, "program_kind", "") or ""
    return f"{kind}/{facts.name}" if kind else facts.name


def _candidates(model: DurationModel, cfg: RetentionConfig) -> list[float]:
    """Pin TTL candidates: quantiles of ``model`` plus slack, capped, ascending."""
    ttls = {min(cfg.max_ttl_s, model.quantile(q) + cfg.slack_s) for q in cfg.quantiles}
    return sorted(t for t in ttls if t > 0)


def reload_s_per_token_of(profile: str) -> float:
    """Seconds to reload one token's KV over PCIe on hardware ``profile`` (a name in
    ``agentrt_serving.hardware.PROFILES``): ``kv_bytes_per_token / pcie_bytes_per_s``, the
    engine model's reload cost (docs/engine-model.md, "The KV CPU tier").

    Raises:
        ConfigError: unknown profile.
    """
    hardware = PROFILES.get(profile)
    if hardware is None:
        raise ConfigError(f"unknown hardware profile {profile!r}; known: {sorted(PROFILES)}")
    if not hardware.kv_bytes_per_token or not math.isfinite(hardware.pcie_bytes_per_s):
        return 0.0
    return hardware.kv_bytes_per_token / hardware.pcie_bytes_per_s
