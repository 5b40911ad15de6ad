"""Per-tenant limits on calls in flight: isolation of the batch, not only of the queue
(docs/tenancy.md, "Isolation of the batch").

Fair shares of charged service (:mod:`agentrt_controller.scheduling.tenancy`) only order the
controller's queue. They are work-conserving, so a greedy tenant fills whatever a well-behaved
tenant leaves: the engine's batch is full of the greedy tenant's calls when the well-behaved
tenant's next call arrives (it waits for a slot, or runs in a batch whose decode steps are slow
because the batch is large). :class:`TenantIsolation` holds capacity back instead.

**Active tenants.** A tenant is *active* while it has calls queued or in flight, and for
:attr:`IsolationConfig.reservation_s` after its last call arrived or finished — a reservation,
so that a tenant between two calls (a tool wait, a think time) finds room for its next one.

**Demand.** An active tenant's demand is its calls queued plus in flight, and at least the
most it had (queued plus in flight) at any point of the last ``reservation_s`` — so a tenant in
a tool wait keeps room for the calls it had a moment ago.

**Above and within their share.** A tenant that has kept calls queued for
:attr:`IsolationConfig.backlog_s` without a break asks for more than it gets: it is *above its
share* (a greedy tenant, once held, is backlogged all the time). While no active tenant is
backlogged so, a tenant is also above its share when its recent charged service per unit
weight (``service_s`` of the calls it finished, decayed with a half-life of
:attr:`IsolationConfig.service_half_life_s`) exceeds the active tenants' mean by more than
10 %: on a large batch nothing queues at the controller, the engine just runs every call
slower. The other active tenants are *within their share*.

**Caps.** With one active tenant nothing is held (work-conserving when alone). With several,
the window of backend ``b``::

    W_b = min(the admission window of b (its bound, for the adaptive window),
              b's batch size when known)

is shared as follows. The tenants within their share get their demand, shared by weighted
max-min fairness (water-filling) when their demands exceed ``W_b``. The tenants above their
share together get what is left, but at most :attr:`IsolationConfig.surplus_share` of ``W_b``,
split by weight: the batch a well-behaved tenant runs in stays light, because a decode step
costs more with more sequences and longer contexts, and a greedy tenant's fresh prompts add
prefill to every step (``agentrt_emulator.core.profiles``). When every active tenant is above
its share (all greedy) or none is, the window is shared by max-min fairness over the demands
alone.

Tenant ``i``'s cap ``cap_i(b)`` is the floor of its allocation (at least 1); it may admit a
call to ``b`` while it holds fewer than ``cap_i(b)`` calls there. Bounding ``W_b`` by the batch
size keeps a contending tenant's calls out of the engine's own (FCFS) waiting queue, where a
well-behaved tenant's call would wait behind them. The cost is throughput: capacity held back
for a well-behaved tenant that does not use all of it (docs/tenancy.md, "Measured").

The Dispatcher applies the caps to calls the scheduler pops; calls of its retained lane are
not held (their KV is hot on the backend) but are counted in flight. The caps are off unless
:attr:`~agentrt_controller.scheduling.tenancy.TenancyConfig.isolation` enables them: no
setting measured meets a well-behaved tenant's within-10-%-of-alone goal on both a large and a
small batch at an acceptable throughput cost (docs/tenancy.md, "Measured").

Pure (docs/architecture.md, design rule 1): ``now_s`` is passed in; no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import Field

from agentrt_controller.config_check import SECTION, check_fields, parse_section

__all__ = ["IsolationConfig", "TenantIsolation"]

_K = TypeVar("_K")

#: A tenant not backlogged is above its share when its recent service per unit weight exceeds
#: the active tenants' mean by this factor: a margin, so that two tenants asking for the same
#: do not hold each other back by turns.
_SERVICE_MARGIN = 1.1


#: A finite number of seconds >= 0.
_Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


@dataclass(frozen=True, slots=True)
class IsolationConfig:
    """Per-tenant in-flight caps (the ``tenant_isolation`` section). Validated on
    construction (:class:`ConfigError`)."""

    __pydantic_config__ = SECTION

    #: ``False`` = no caps (fair shares of the queue only).
    enabled: bool = True
    #: A tenant stays active this long after its last call arrived or finished (seconds,
    #: >= 0, finite): its share stays reserved across its tool waits and think times.
    reservation_s: _Seconds = 2.0
    #: Fraction of a backend's window, in (0, 1], that the tenants above their fair share
    #: may hold together while some active tenant is within its share (1 = all that the
    #: tenants within their share leave); ``None`` = plain max-min over the demands, the
    #: tenants within their share not served first.
    surplus_share: Annotated[float, Field(gt=0, le=1)] | None = 1.0
    #: A tenant with calls queued this long without a break is above its share (seconds,
    #: >= 0, finite).
    backlog_s: _Seconds = 5.0
    #: Half-life of the recent charged service that marks a tenant above its share while
    #: none is backlogged (seconds, > 0, finite).
    service_half_life_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 30.0

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> IsolationConfig:
        """From a config-file table with the field names above; unknown keys raise
        :class:`ConfigError`."""
        return parse_section(cls, values, "tenant_isolation")


class TenantIsolation:
    """The caps of the module docstring, and the in-flight counts they are computed from.

    The driver (the Dispatcher) reports every call that arrives (:meth:`on_submit`), is
    admitted (:meth:`on_admit`) and leaves a backend (:meth:`on_release`: finished, failed or
    requeued), records the queues before each decision (:meth:`observe`), and asks
    :meth:`allows` before admitting a call of a tenant to a backend. State is kept per tenant
    for the policy's life (tenants come from the controller's key file, a bounded set).
    """

    def __init__(self, config: IsolationConfig, weight_of: Callable[[str], float]) -> None:
        """``weight_of(tenant)``: the tenant's fair-share weight (> 0)."""
        self.config = config
        self._weight_of = weight_of
        #: Calls in flight by (tenant, backend id).
        self._in_flight: dict[tuple[str, str], int] = {}
        #: Calls in flight per tenant, all backends.
        self._tenant_total: dict[str, int] = {}
        #: Admitted call id -> (tenant, backend id).
        self._calls: dict[str, tuple[str, str]] = {}
        #: Last time a call of the tenant arrived or left a backend (seconds).
        self._last_activity_s: dict[str, float] = {}
        #: Per tenant: its largest recent demand (queued + in flight) and when it was set
        #: (seconds); :meth:`demand` ignores it ``reservation_s`` after that.
        self._peak: dict[str, tuple[int, float]] = {}
        #: Since when each tenant has had calls queued without a break (seconds).
        self._backlogged_since: dict[str, float] = {}
        #: Per tenant: decayed charged service (seconds) and when it was last decayed.
        self._service: dict[str, tuple[float, float]] = {}
        #: Times :meth:`allows` said no (for introspection).
        self.held_total = 0

    # --- facts ------------------------------------------------------------------------------

    def on_submit(self, tenant: str, now_s: float) -> None:
        """A call of ``tenant`` arrived."""
        self._last_activity_s[tenant] = now_s

    def on_admit(self, call_id: str, tenant: str, backend_id: str, now_s: float) -> None:
        """Call ``call_id`` of ``tenant`` was admitted to ``backend_id``."""
        if call_id in self._calls:
            self.on_release(call_id, now_s)
        self._calls[call_id] = (tenant, backend_id)
        key = (tenant, backend_id)
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        self._tenant_total[tenant] = self._tenant_total.get(tenant, 0) + 1
        self._last_activity_s[tenant] = now_s

    def on_release(self, call_id: str, now_s: float, service_s: float = 0.0) -> None:
        """Call ``call_id`` left its backend (finished with ``service_s`` charged, failed,
        or put back in the queue); unknown ids are ignored."""
        placed = self._calls.pop(call_id, None)
        if placed is None:
            return
        if service_s > 0:
            self._service[placed[0]] = (self.recent_service_s(placed[0], now_s) + service_s, now_s)
        _decrement(self._in_flight, placed)
        tenant = placed[0]
        _decrement(self._tenant_total, tenant)
        self._last_activity_s[tenant] = now_s

    def observe(self, now_s: float, queued: Mapping[str, int]) -> None:
        """Record each tenant's demand now (``queued``: calls queued per tenant) for the
        peaks of :meth:`demand`; the Dispatcher calls it before each admission decision."""
        for tenant in [t for t in self._backlogged_since if not queued.get(t)]:
            del self._backlogged_since[tenant]
        for tenant, calls in queued.items():
            if calls > 0:
                self._backlogged_since.setdefault(tenant, now_s)
        for tenant in set(queued) | set(self._tenant_total):
            current = queued.get(tenant, 0) + self._tenant_total.get(tenant, 0)
            peak, at = self._peak.get(tenant, (0, -math.inf))
            if current >= peak or now_s - at > self.config.reservation_s:
                self._peak[tenant] = (current, now_s)

    def recent_service_s(self, tenant: str, now_s: float) -> float:
        """The tenant's charged service, decayed with ``service_half_life_s`` (seconds)."""
        value, at = self._service.get(tenant, (0.0, now_s))
        decay: float = 0.5 ** (max(0.0, now_s - at) / self.config.service_half_life_s)
        return value * decay

    def backlogged(self, tenant: str, now_s: float) -> bool:
        """Whether ``tenant`` has had calls queued for ``backlog_s`` without a break (as
        recorded by :meth:`observe`)."""
        since = self._backlogged_since.get(tenant)
        return since is not None and now_s - since >= self.config.backlog_s

    def above_share(self, now_s: float, active: Collection[str]) -> set[str]:
        """The active tenants above their share (module docstring): the backlogged ones, or,
        when none is, those whose recent service per unit weight exceeds the mean by more
        than 10 %."""
        above = {t for t in active if self.backlogged(t, now_s)}
        if above:
            return above
        per_weight = {t: self.recent_service_s(t, now_s) / self._weight_of(t) for t in active}
        weights = sum(self._weight_of(t) for t in active)
        mean = sum(self.recent_service_s(t, now_s) for t in active) / weights
        return {t for t, v in per_weight.items() if mean > 0 and v > _SERVICE_MARGIN * mean}

    def demand(self, tenant: str, now_s: float, queued: Mapping[str, int]) -> int:
        """Calls ``tenant`` has queued plus in flight, and at least its peak (as recorded by
        :meth:`observe`) of the last ``reservation_s``."""
        current = queued.get(tenant, 0) + self._tenant_total.get(tenant, 0)
        peak, at = self._peak.get(tenant, (0, -math.inf))
        if now_s - at > self.config.reservation_s:
            return current
        return max(current, peak)

    # --- decisions --------------------------------------------------------------------------

    def active(self, now_s: float, queued: Mapping[str, int]) -> set[str]:
        """Tenants with calls queued (``queued``: calls per tenant) or in flight, or whose
        last call arrived or finished at most ``reservation_s`` ago."""
        horizon = now_s - self.config.reservation_s
        active = {t for t, n in queued.items() if n > 0} | set(self._tenant_total)
        active.update(t for t, at in self._last_activity_s.items() if at >= horizon)
        return active

    def caps(self, window: float, now_s: float, queued: Mapping[str, int]) -> dict[str, int]:
        """Each active tenant's cap on a backend with window ``window`` (calls; already
        bounded by the batch size when known): max-min fairness over the tenants' demands,
        the tenants above their share bounded by ``surplus_share`` (module docstring). Empty
        with fewer than two active tenants: nothing is held. ``queued``: calls queued per
        tenant."""
        active = self.active(now_s, queued)
        if len(active) < 2:
            return {}
        weights = {t: self._weight_of(t) for t in active}
        demands = {t: float(max(1, self.demand(t, now_s, queued))) for t in active}
        above = self.above_share(now_s, active)
        surplus = self.config.surplus_share
        if surplus is None or not above or len(above) == len(active):
            shares = _water_fill(demands, weights, window)
        else:
            within = [t for t in active if t not in above]
            shares = _water_fill({t: demands[t] for t in within}, weights, window)
            left = min(surplus * window, max(0.0, window - sum(shares.values())))
            weight_above = sum(weights[t] for t in above)
            shares.update({t: left * weights[t] / weight_above for t in above})
        return {t: max(1, math.floor(share + 1e-9)) for t, share in shares.items()}

    def allows(
        self,
        tenant: str,
        backend_id: str,
        window: float,
        now_s: float,
        queued: Mapping[str, int],
    ) -> bool:
        """Whether one more call of ``tenant`` may go to ``backend_id`` now: it holds fewer
        than its cap there. ``window``: the backend's window (calls; ``math.inf`` =
        unbounded), already bounded by its batch size when known; ``queued``: calls queued
        per tenant."""
        caps = self.caps(window, now_s, queued)
        if tenant not in caps or self._in_flight.get((tenant, backend_id), 0) < caps[tenant]:
            return True
        self.held_total += 1
        return False

    # --- introspection ----------------------------------------------------------------------

    def in_flight(self, tenant: str, backend_id: str | None = None) -> int:
        """Calls of ``tenant`` in flight (on ``backend_id``, or on all backends)."""
        if backend_id is None:
            return self._tenant_total.get(tenant, 0)
        return self._in_flight.get((tenant, backend_id), 0)

    def snapshot(self, now_s: float, queued: Mapping[str, int]) -> dict[str, Any]:
        """JSON-able: the configuration, the active tenants, their demands and the calls in
        flight."""
        active = self.active(now_s, queued)
        return {
            "enabled": True,
            "reservation_s": self.config.reservation_s,
            "surplus_share": self.config.surplus_share,
            "backlog_s": self.config.backlog_s,
            "above_share": sorted(self.above_share(now_s, active)),
            "active_tenants": sorted(active),
            "demand": {t: self.demand(t, now_s, queued) for t in sorted(active)},
            "in_flight": [
                {"tenant": t, "backend": b, "calls": n}
                for (t, b), n in sorted(self._in_flight.items())
            ],
            "held_total": self.held_total,
        }


def _water_fill(
    demands: Mapping[str, float], weights: Mapping[str, float], capacity: float
) -> dict[str, float]:
    """Weighted max-min fair allocation of ``capacity`` over ``demands``: a demand below its
    weighted share of what is left is met in full, the rest is split by weight."""
    shares: dict[str, float] = {}
    pending = dict(demands)
    left = capacity
    while pending:
        total_weight = sum(weights[t] for t in pending)
        fair = {t: left * weights[t] / total_weight for t in pending}
        met = [t for t, demand in pending.items() if demand <= fair[t]]
        if not met:
            shares.update(fair)
            break
        for tenant in met:
            shares[tenant] = pending.pop(tenant)
            left -= shares[tenant]
    return shares


def _decrement(counts: dict[_K, int], key: _K) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
