"""Two-level scheduling: weighted fair shares between tenants, any policy inside a tenant
(docs/tenancy.md).

Attained-service scheduling (PLAS / ATLAS, Autellix arXiv 2502.13965) trusts the client's
program ids: a fresh id starts at zero service, so a client that rotates ids on every call (or
sends untagged calls, each a one-call program) puts every call ahead of every long program.
:class:`TenantFairScheduler` removes the incentive by scheduling on two levels:

* **between tenants**, start-time fair queueing (Goyal, Vin and Cheng, SIGCOMM 1996) over the
  *service the cost model charges* (``service_s`` of :meth:`on_finish`), with per-tenant
  weights — the same counter-based scheme as the Virtual Token Counter of Sheng et al.,
  "Fairness in Serving Large Language Models" (OSDI 2024, arXiv 2401.00588). Tenant ``i`` has a
  virtual time ``v_i = (charged_i + in_flight_i) / w_i`` in seconds of service per unit weight;
  :meth:`pop` serves the backlogged tenant with the smallest ``v_i`` (ties: the tenant seen
  first). A popped call is charged an *estimate* at once (the tenant's mean charged service per
  call so far; before any call finished, the mean over all tenants, else
  :attr:`TenancyConfig.initial_call_charge_s`), and :meth:`on_finish` replaces the estimate by
  the charged service — so one admission round that fills a whole engine cannot hand every
  slot to one tenant before any call finished. The system virtual time ``V`` is the start tag of
  the last call popped (SFQ's ``v(t)``); a tenant whose queue was empty when a call arrives
  starts again at ``max(v_i, V, min_j v_j)`` over the backlogged tenants ``j`` (VTC's lift):
  an idle tenant banks no credit.
* **inside a tenant**, one instance of the inner policy (``fcfs``, ``plas``, ``atlas``...) per
  tenant, built by the factory on the one shared :class:`~agentrt_controller.process_table.
  ProcessTable`, orders that tenant's calls exactly as it would alone. Fresh and untagged ids
  are calls of their tenant like any other, so rotating ids only reorders the rotating tenant's
  own calls.

The tenant of a call is ``call.facts.program.tenant`` (``None`` = the default tenant, scheduled
and weighted under the name :data:`DEFAULT_TENANT`). With one tenant the pop order is exactly
the inner policy's. Tenants are kept for the scheduler's life (they come from the controller's
tenant file, a bounded set).

**The retained lane is per tenant** (:class:`~agentrt_controller.scheduling.lane.RetainedLane`
wraps each tenant's inner policy): a call of a retained program (``CallEntry.lane ==
"retained"``) goes ahead of its own tenant's queued calls only. The fair-share order picks the
tenant first, and the call is charged (estimate at :meth:`~TenantFairScheduler.pop`, its
service at :meth:`~TenantFairScheduler.on_finish`) and capped like any other, so retention
gives a tenant lower latency inside its share, never more than its share (docs/tenancy.md,
"The retained lane").

**Per-tenant caps on calls in flight** (:mod:`agentrt_controller.scheduling.isolation`,
:attr:`TenancyConfig.isolation`, off by default): the scheduler owns the
:class:`~agentrt_controller.scheduling.isolation.TenantIsolation` policy
(:attr:`TenantFairScheduler.isolation`) and the Dispatcher applies it, popping with
``pop(now_s, exclude=held_tenants)``.

**Backend priority** (for backends that honour one, e.g. vLLM with priority scheduling): the
tenants with calls queued or in flight are ranked by virtual time (0 = furthest behind its
share; the call's own tenant by the call's start tag), and a call gets
``rank x K + inner priority`` with ``K`` the inner policy's number of
queues — so the engine, too, serves the tenant behind first and the inner order within a
tenant. With one tenant it is the inner policy's priority.

Building one (the controller service passes its tenant file's weights)::

    from agentrt_controller.scheduling.factory import build_scheduler
    from agentrt_controller.scheduling.tenancy import TenancyConfig

    scheduler = build_scheduler(
        "plas", scheduling_options, table=table,
        tenancy=TenancyConfig(weights={"acme": 2.0, "free-tier": 1.0}),
    )

``tenancy`` may also be a mapping of :class:`TenancyConfig` fields (a config-file table);
``None`` or ``enabled=False`` builds the bare inner policy.

Pure (docs/architecture.md, design rule 1): ``now_s`` is passed in; no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BeforeValidator, Field

from agentrt.errors import ConfigError
from agentrt_controller.config_check import SECTION, check_fields, parse_section
from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.scheduling.api import Scheduler
from agentrt_controller.scheduling.call import CallEntry
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.isolation import IsolationConfig, TenantIsolation
from agentrt_controller.scheduling.lane import RetainedLane

__all__ = ["DEFAULT_TENANT", "TenancyConfig", "TenantFairScheduler", "tenant_of"]

#: The name under which calls without a tenant (``ProgramKey.tenant is None``) are scheduled
#: and weighted. A tenant literally named so shares that tenant's share.
DEFAULT_TENANT = "default"


def tenant_of(call: CallEntry) -> str:
    """The tenant a call is scheduled and charged under."""
    tenant = call.facts.program.tenant
    return DEFAULT_TENANT if tenant is None else tenant


#: A finite number > 0.
_Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]


@dataclass(frozen=True, slots=True)
class TenancyConfig:
    """Fair shares between tenants (the ``tenancy`` section). Validated on construction
    (:class:`ConfigError`)."""

    __pydantic_config__ = SECTION

    #: Tenant name -> weight (> 0, unitless). A tenant's share of charged service, while every
    #: tenant is backlogged, is its weight over the sum of the backlogged tenants' weights.
    weights: Mapping[str, _Positive] = field(default_factory=dict)
    #: Weight of a tenant not in :attr:`weights` (> 0), including :data:`DEFAULT_TENANT`.
    default_weight: _Positive = 1.0
    #: Estimated service of a popped call (seconds, > 0) before any call has finished; later
    #: estimates are means of charged service.
    initial_call_charge_s: _Positive = 0.5
    #: ``False`` = no tenancy: the factory builds the bare inner policy.
    enabled: bool = True
    #: Per-tenant limits on calls in flight (:mod:`~agentrt_controller.scheduling.isolation`,
    #: applied by the Dispatcher); off by default (docs/tenancy.md, "Isolation of the batch":
    #: no setting measured meets its goal at an acceptable cost). A config table may give a
    #: mapping of :class:`IsolationConfig` fields, or ``true`` / ``false``.
    isolation: Annotated[IsolationConfig, BeforeValidator(_isolation_config)] = field(
        default_factory=lambda: IsolationConfig(enabled=False)
    )

    def __post_init__(self) -> None:
        check_fields(self)
        for tenant in self.weights:
            if not tenant:
                raise ConfigError("tenant names must be non-empty strings")

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> TenancyConfig:
        """Build from a config-file / JSON table with the field names above; unknown keys
        raise :class:`ConfigError`."""
        return parse_section(cls, values, "tenancy")

    def weight(self, tenant: str) -> float:
        """The weight of ``tenant``."""
        return self.weights.get(tenant, self.default_weight)


def _isolation_config(value: object) -> IsolationConfig:
    if isinstance(value, IsolationConfig):
        return value
    if isinstance(value, bool):
        return IsolationConfig(enabled=value)
    if isinstance(value, Mapping):
        return parse_section(IsolationConfig, value, "")
    raise ConfigError(f"tenancy 'isolation' must be a table or true / false, got {value!r}")


@dataclass(slots=True)
class _Tenant:
    """One tenant's inner scheduler and accounting."""

    name: str
    weight: float
    #: The tenant's inner policy behind its retained lane.
    inner: RetainedLane
    #: Order in which tenants were first seen: breaks virtual-time ties deterministically.
    order: int
    #: (charged + estimated in-flight service) / weight (seconds per unit weight).
    virtual_s: float = 0.0
    #: Service charged to the tenant's finished calls (seconds).
    charged_s: float = 0.0
    #: Finished calls charged.
    finished_calls: int = 0
    #: Estimated charge of each popped, unfinished call, by call id (seconds).
    in_flight: dict[str, float] = field(default_factory=dict)
    #: The tenant's virtual time when each popped, unfinished call was popped (its start tag).
    start_tags: dict[str, float] = field(default_factory=dict)


class TenantFairScheduler:
    """Start-time fair queueing between tenants over charged service; one inner scheduler
    per tenant (module docstring). Implements
    :class:`~agentrt_controller.scheduling.api.Scheduler`."""

    def __init__(
        self,
        config: TenancyConfig,
        build_inner: Callable[[ProcessTable], Scheduler],
        table: ProcessTable | None = None,
    ) -> None:
        """``build_inner(table)``: a fresh inner scheduler recording in ``table`` (called once
        per tenant, at its first call). ``table``: the shared process table (a private one
        when ``None``)."""
        self.config = config
        self.table = table if table is not None else ProcessTable()
        self._build_inner = build_inner
        probe = build_inner(self.table)
        #: The inner policy's name.
        self.inner_name: str = probe.name
        self.name = f"{probe.name}+tenancy"
        self._spare: Scheduler | None = probe
        self._tenants: dict[str, _Tenant] = {}
        #: SFQ's system virtual time: the start tag of the last call popped (seconds/weight).
        self.system_virtual_s = 0.0
        #: Per-tenant in-flight caps the Dispatcher applies; ``None`` when disabled.
        self.isolation: TenantIsolation | None = (
            TenantIsolation(config.isolation, config.weight) if config.isolation.enabled else None
        )

    # --- tenants ----------------------------------------------------------------------------

    def _tenant(self, name: str) -> _Tenant:
        tenant = self._tenants.get(name)
        if tenant is None:
            policy = self._spare if self._spare is not None else self._build_inner(self.table)
            self._spare = None
            inner = RetainedLane(policy)
            tenant = _Tenant(name, self.config.weight(name), inner, order=len(self._tenants))
            tenant.virtual_s = self.system_virtual_s  # a new tenant starts now, no credit
            self._tenants[name] = tenant
        return tenant

    def _estimate_s(self, tenant: _Tenant) -> float:
        if tenant.finished_calls:
            return tenant.charged_s / tenant.finished_calls
        calls = sum(t.finished_calls for t in self._tenants.values())
        if calls:
            return sum(t.charged_s for t in self._tenants.values()) / calls
        return self.config.initial_call_charge_s

    # --- Scheduler protocol -----------------------------------------------------------------

    def submit(self, call: CallEntry, now_s: float) -> None:
        tenant = self._tenant(tenant_of(call))
        if tenant.inner.queued() == 0:  # becomes backlogged: no banked credit
            tenant.virtual_s = max(tenant.virtual_s, self._activation_floor_s())
        tenant.inner.submit(call, now_s)

    def _activation_floor_s(self) -> float:
        """The virtual time a tenant that becomes backlogged starts at, at least: the
        smallest virtual time of the backlogged tenants (VTC's lift), and never below the
        system virtual time (SFQ's ``v(t)``, which also covers an idle system)."""
        backlogged = [t.virtual_s for t in self._tenants.values() if t.inner.queued()]
        return max(self.system_virtual_s, min(backlogged, default=self.system_virtual_s))

    def retained_queued(self) -> int:
        """Calls waiting in the tenants' retained lanes."""
        return sum(t.inner.retained_queued() for t in self._tenants.values())

    def queued_by_tenant(self) -> dict[str, int]:
        """Calls queued per tenant with any, in the order the tenants were first seen."""
        return {name: n for name, t in self._tenants.items() if (n := t.inner.queued())}

    def pop(self, now_s: float, *, exclude: Collection[str] = ()) -> CallEntry | None:
        """The protocol's ``pop``; ``exclude``: tenants not to pop from now (the
        Dispatcher's held tenants, :mod:`~agentrt_controller.scheduling.isolation`)."""
        backlogged = [
            t for t in self._tenants.values() if t.inner.queued() and t.name not in exclude
        ]
        if not backlogged:
            return None
        tenant = min(backlogged, key=lambda t: (t.virtual_s, t.order))
        call = tenant.inner.pop(now_s)
        if call is None:
            return None
        self.system_virtual_s = max(self.system_virtual_s, tenant.virtual_s)
        estimate = self._estimate_s(tenant)
        tenant.in_flight[call.facts.call_id] = estimate
        tenant.start_tags[call.facts.call_id] = tenant.virtual_s
        tenant.virtual_s += estimate / tenant.weight
        return call

    def requeue(self, call: CallEntry, now_s: float) -> None:
        tenant = self._tenant(tenant_of(call))
        estimate = tenant.in_flight.pop(call.facts.call_id, None)
        tenant.start_tags.pop(call.facts.call_id, None)
        if estimate is not None:  # not admitted after all: take the estimate back
            tenant.virtual_s -= estimate / tenant.weight
        tenant.inner.requeue(call, now_s)

    def cancel(self, call: CallEntry, now_s: float) -> bool:
        tenant = self._tenants.get(tenant_of(call))
        return tenant is not None and tenant.inner.cancel(call, now_s)

    def queued(self) -> int:
        return sum(t.inner.queued() for t in self._tenants.values())

    def backend_priority(self, call: CallEntry) -> int:
        """``rank x K + inner priority`` (module docstring): ``rank`` counts the other active
        tenants (calls queued or in flight) whose virtual time is below the call's start tag
        (its tenant's virtual time when it was popped, before its own estimate)."""
        tenant = self._tenant(tenant_of(call))
        inner = tenant.inner.backend_priority(call)
        mine = (tenant.start_tags.get(call.facts.call_id, tenant.virtual_s), tenant.order)
        rank = sum(
            1
            for other in self._tenants.values()
            if other is not tenant
            and (other.inner.queued() or other.in_flight)
            and (other.virtual_s, other.order) < mine
        )
        config = getattr(tenant.inner.policy, "config", None)
        levels = config.levels if isinstance(config, SchedulerConfig) else 1
        return rank * levels + inner

    def on_tokens(self, call: CallEntry, new_tokens: int, now_s: float) -> None:
        self._tenant(tenant_of(call)).inner.on_tokens(call, new_tokens, now_s)

    def token_counter(self, call: CallEntry) -> Callable[[CallEntry, int, float], None]:
        return self._tenant(tenant_of(call)).inner.token_counter(call)

    def on_finish(self, call: CallEntry, service_s: float, now_s: float) -> None:
        tenant = self._tenant(tenant_of(call))
        estimate = tenant.in_flight.pop(call.facts.call_id, 0.0)
        tenant.start_tags.pop(call.facts.call_id, None)
        tenant.virtual_s += (service_s - estimate) / tenant.weight
        tenant.charged_s += service_s
        tenant.finished_calls += 1
        tenant.inner.on_finish(call, service_s, now_s)

    def drop_expired(self, now_s: float) -> list[CallEntry]:
        dropped: list[CallEntry] = []
        for tenant in self._tenants.values():
            if tenant.inner.queued():
                dropped += tenant.inner.drop_expired(now_s)
        return dropped

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        name = DEFAULT_TENANT if program.tenant is None else program.tenant
        tenant = self._tenants.get(name)
        if tenant is not None:
            tenant.inner.on_program_end(program, now_s)
        else:
            self.table.end(program, now_s)

    # --- introspection ----------------------------------------------------------------------

    def tenant_shares(self) -> dict[str, float]:
        """Each tenant's fraction of all service charged so far (finished calls; 0 when
        nothing was charged)."""
        total = sum(t.charged_s for t in self._tenants.values())
        return {
            name: (t.charged_s / total if total > 0 else 0.0) for name, t in self._tenants.items()
        }

    def snapshot(self, now_s: float) -> dict[str, object]:
        """The inner policies' queues merged by level (each call tagged with its tenant) and,
        under ``tenancy``, each tenant's weight, virtual time, charged and in-flight service,
        share of charged service and queued / in-flight calls."""
        shares = self.tenant_shares()
        # Per level: the first inner queue's view, the summed length, the tenant-tagged calls.
        levels: dict[int, dict[str, object]] = {}
        lengths: dict[int, int] = {}
        calls: dict[int, list[object]] = {}
        tenants = []
        promotions = 0
        for name, tenant in self._tenants.items():
            inner = tenant.inner.snapshot(now_s)
            promoted = inner.get("promotions_total")
            promotions += promoted if isinstance(promoted, int) else 0
            queues = inner.get("queues")
            for queue in queues if isinstance(queues, list) else []:
                level = int(queue["level"])
                levels.setdefault(level, queue)
                lengths[level] = lengths.get(level, 0) + int(queue.get("length", 0))
                calls.setdefault(level, []).extend(
                    {**c, "tenant": name} for c in queue.get("calls", [])
                )
            tenants.append(
                {
                    "tenant": name,
                    "weight": tenant.weight,
                    "virtual_s": tenant.virtual_s,
                    "charged_service_s": tenant.charged_s,
                    "in_flight_charge_s": sum(tenant.in_flight.values()),
                    "share": shares[name],
                    "queued": tenant.inner.queued(),
                    "in_flight": len(tenant.in_flight),
                    "finished_calls": tenant.finished_calls,
                }
            )
        return {
            "policy": self.name,
            "inner_policy": self.inner_name,
            "queued": self.queued(),
            "queues": [
                {**levels[level], "length": lengths[level], "calls": calls[level]}
                for level in sorted(levels)
            ],
            "tenancy": {"system_virtual_s": self.system_virtual_s, "tenants": tenants},
            # The inner policies' anti-starvation promotions, summed (tenants are never
            # forgotten, so the sum only grows: a counter).
            "promotions_total": promotions,
        }
