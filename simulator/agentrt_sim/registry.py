"""Policy names → fresh policy objects for one simulated run: the single place names resolve.

* Every policy object is built by the controller's own builder (:mod:`agentrt_controller.
  policies`, the one ``agentrt controller serve`` uses): schedulers (with the run's
  :class:`~agentrt_controller.scheduling.srpt.OracleBook`, which the simulation fills with the
  clairvoyant figures SRPT needs), ``fixed``
  (``--admission-window N`` or ``unlimited``) and ``adaptive`` admission, routers and the TTL
  retention policy — same names, same parameters, and the same parameters derived from the
  cost model (:attr:`PolicySpec.cost`: the ``prefix`` router's and retention's
  ``prefill_s_per_token``). ``CallFacts.block_hashes`` are filled when the router declares it reads
  them (:func:`agentrt_controller.policies.needs_block_hashes`), as in the controller.
* Tenancy: ``PolicySpec.tenancy`` puts the scheduler inside weighted fair shares between
  tenants (the factory's ``tenancy=``, :class:`~agentrt_controller.scheduling.tenancy.
  TenancyConfig`; docs/tenancy.md) with ``PolicySpec.tenant_weights``, and
  ``PolicySpec.isolation`` sets its per-tenant in-flight caps (``IsolationConfig`` fields).
* Controller replicas: ``PolicySpec.replicas`` dispatchers, each built fresh from the same
  names (its own process table, queues, router and admission state), spread by
  ``PolicySpec.shard`` (:class:`~agentrt_controller.replicas.ReplicaBalancer`). One retention
  policy object serves them all (its learned tool-duration history is pooled).
* Retention policies: the table :data:`RETENTION` below; a new policy is one entry (a
  factory of the cost model). ``--retention on`` means the first non-``off`` entry.

Unknown names raise :class:`~agentrt.errors.ConfigError` listing the valid ones
(docs/architecture.md, design rule 2: never silently ignored).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrt.errors import ConfigError
from agentrt_controller import defaults
from agentrt_controller.admission_window import AdmissionWindow
from agentrt_controller.cost_model import CostFunction, CostModel
from agentrt_controller.policies import (
    PolicyConfig,
    build_dispatcher,
    build_retention_policy,
    needs_block_hashes,
)
from agentrt_controller.replicas import SHARD_MODES
from agentrt_controller.retention import RetentionPolicy
from agentrt_controller.routing.factory import ROUTER_NAMES
from agentrt_controller.scheduling.factory import SCHEDULER_NAMES
from agentrt_controller.scheduling.isolation import IsolationConfig
from agentrt_controller.scheduling.srpt import OracleBook
from agentrt_controller.scheduling.tenancy import TenancyConfig
from agentrt_sim.retention import NoRetention
from agentrt_sim.sim import Policies

__all__ = [
    "REPLICA_WINDOWS",
    "RETENTION",
    "ROUTER_NAMES",
    "SCHEDULER_NAMES",
    "PolicySpec",
    "build_policies",
    "describe_tenancy",
    "parse_window",
    "resolve_retention",
]


def _no_retention(cost: CostModel) -> RetentionPolicy:
    return NoRetention()


def _ttl_retention(cost: CostModel) -> RetentionPolicy:
    # agentrt_controller.retention.TtlRetentionPolicy: TTL from the tool's duration
    # distribution, return probability and KV pressure (docs/routing.md, "KV retention"),
    # built as the controller builds it.
    return build_retention_policy({}, cost)


#: Retention name → factory (of the cost model). ``off`` first; ``on`` resolves to the next.
RETENTION: Mapping[str, Callable[[CostModel], RetentionPolicy]] = {
    "off": _no_retention,
    "ttl": _ttl_retention,
}

#: How replicas share an engine's batch in their admission: ``shared`` = each sees the whole
#: batch (the window follows the shared waiting queue), ``split`` = each its share.
REPLICA_WINDOWS = ("shared", "split")

#: Idle timeout of the process table (seconds): the simulator ends every program explicitly,
#: so this only matters for programs cut off by ``stop_s``.
_IDLE_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class PolicySpec:
    """One configuration to simulate, by names (what ``agentrt bench sim`` compares).

    Every default is the controller's (:mod:`agentrt_controller.defaults`): a spec built with
    no arguments is what ``agentrt controller serve --backend URL`` runs."""

    #: Scheduler name (``fcfs``, ``mlfq``, ``plas``, ``atlas``, ``srpt``).
    policy: str = defaults.POLICY
    #: Router name (``agentrt_controller.routing.factory.ROUTER_NAMES``).
    router: str = defaults.ROUTER
    #: ``off``, ``on`` or a :data:`RETENTION` name.
    retention: str = defaults.RETENTION
    #: Controller admission window per engine (calls); ``None`` = unlimited (the engine
    #: queues everything: FCFS-at-engine); ``"adaptive"`` = the adaptive window (sized from
    #: the engine's waiting queue, at most its batch size plus ``target_waiting``).
    admission_window: AdmissionWindow = defaults.ADMISSION_WINDOW
    #: Scheduler parameters (``SchedulerConfig`` fields), e.g. ``{"starvation_beta": 3}``.
    #: The factory applies them over ``agentrt_controller.defaults.SCHEDULING``.
    scheduler_options: Mapping[str, Any] = field(default_factory=dict)
    #: Router parameters (see :func:`agentrt_controller.routing.factory.build_router`).
    router_options: Mapping[str, Any] = field(default_factory=dict)
    #: Adaptive-window parameters (``AdaptiveWindowConfig`` fields); only with ``"adaptive"``.
    admission_options: Mapping[str, Any] = field(default_factory=lambda: dict(defaults.ADMISSION))
    #: Memory-aware admission parameters (``MemoryAdmissionConfig`` fields, e.g.
    #: ``{"enabled": False}``); the controller's default when empty.
    memory_admission: Mapping[str, Any] = field(default_factory=dict)
    #: Weighted fair shares of charged service between tenants, the policy inside each
    #: tenant (docs/tenancy.md); ``False`` = one policy over every tenant's calls.
    tenancy: bool = False
    #: Tenant name -> fair-share weight (> 0) when ``tenancy``; unlisted tenants weigh 1.
    tenant_weights: Mapping[str, float] = field(default_factory=dict)
    #: Per-tenant in-flight caps when ``tenancy``: ``IsolationConfig`` fields (``enabled``,
    #: ``reservation_s``, ``surplus_share``); ``None`` = ``TenancyConfig``'s default (the
    #: controller's).
    isolation: Mapping[str, Any] | None = None
    #: The controller's cost model table (``CostModel.from_mapping``): where the router's and
    #: retention's ``prefill_s_per_token`` come from, as in ``agentrt controller serve``.
    cost: Mapping[str, Any] = field(default_factory=lambda: dict(defaults.COST))
    #: Controller replicas over the same engines (>= 1; docs/simulator.md, "Controller
    #: replicas").
    replicas: int = 1
    #: How the balancer spreads requests over replicas: ``program`` or ``call``.
    shard: str = "program"
    #: :data:`REPLICA_WINDOWS`: each replica's admission sees the engine's whole batch
    #: (``shared``) or its share of it (``split``).
    replica_window: str = "shared"


def parse_window(text: str) -> AdmissionWindow:
    """``--admission-window`` value: ``N`` >= 1, ``unlimited`` or ``adaptive``."""
    value = text.strip().lower()
    if value in ("unlimited", "none", "inf"):
        return None
    if value == "adaptive":
        return "adaptive"
    try:
        window = int(value)
    except ValueError:
        window = 0
    if window < 1:
        raise ConfigError(
            f"admission window must be an integer >= 1, 'unlimited' or 'adaptive', got {text!r}"
        )
    return window


def resolve_retention(name: str) -> str:
    """The :data:`RETENTION` key for ``name`` (``on`` = first non-``off`` policy)."""
    key = name.strip().lower()
    if key == "on":
        enabled = [n for n in RETENTION if n != "off"]
        if not enabled:
            raise ConfigError(
                "retention 'on' is not available yet: no retention policy is registered "
                f"(simulator/registry.py RETENTION); valid: {', '.join(RETENTION)}"
            )
        return enabled[0]
    if key not in RETENTION:
        raise ConfigError(f"unknown retention {name!r}; valid: on, {', '.join(RETENTION)}")
    return key


def _tenancy(spec: PolicySpec) -> TenancyConfig | None:
    if not spec.tenancy:
        return None
    weights = dict(spec.tenant_weights)
    if spec.isolation is None:
        return TenancyConfig(weights=weights)
    return TenancyConfig(weights=weights, isolation=IsolationConfig.from_mapping(spec.isolation))


def describe_tenancy(spec: PolicySpec) -> str:
    """``off``, ``fair`` (shares of the queue only) or ``isolate`` with the caps' non-default
    parameters, e.g. ``isolate(surplus_share=0.5)``: what ``--tenancy`` takes."""
    tenancy = _tenancy(spec)
    if tenancy is None:
        return "off"
    isolation = tenancy.isolation
    if not isolation.enabled:
        return "fair"
    default = IsolationConfig()
    params = [
        f"{name}={value if value is None else format(value, 'g')}"
        for name in ("surplus_share", "reservation_s")
        if (value := getattr(isolation, name)) != getattr(default, name)
    ]
    return f"isolate({','.join(params)})" if params else "isolate"


def build_policies(spec: PolicySpec, cost_model: CostFunction | None = None) -> Policies:
    """Fresh policy objects for one run of ``spec`` (a dispatcher per replica).

    Raises :class:`ConfigError` for unknown names or bad parameters.
    """
    replicas = spec.replicas
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ConfigError(f"controller replicas must be an integer >= 1, got {replicas!r}")
    if spec.shard not in SHARD_MODES:
        raise ConfigError(f"unknown shard mode {spec.shard!r}; valid: {', '.join(SHARD_MODES)}")
    if spec.replica_window not in REPLICA_WINDOWS:
        raise ConfigError(
            f"unknown replica window {spec.replica_window!r}; valid: {', '.join(REPLICA_WINDOWS)}"
        )
    oracle = OracleBook()  # the simulation fills it; only srpt reads it
    config = _policy_config(spec, oracle)
    dispatchers = [build_dispatcher(config) for _ in range(replicas)]
    return Policies(
        dispatcher=dispatchers[0],
        retention=RETENTION[resolve_retention(spec.retention)](config.cost),
        cost_model=cost_model,
        block_hashes=needs_block_hashes(dispatchers[0].router),
        replicas=tuple(dispatchers[1:]),
        shard=spec.shard,
        split_window=spec.replica_window == "split",
        oracle=oracle,
    )


def _policy_config(spec: PolicySpec, oracle: OracleBook) -> PolicyConfig:
    """What each controller replica is built from (fresh objects per dispatcher)."""
    return PolicyConfig(
        policy=spec.policy,
        scheduling=spec.scheduler_options,
        router=spec.router,
        routing=spec.router_options,
        admission_window=spec.admission_window,
        admission=spec.admission_options,
        memory_admission=spec.memory_admission,
        tenancy=_tenancy(spec),
        idle_timeout_s=_IDLE_TIMEOUT_S,
        oracle=oracle,
        cost=CostModel.from_mapping(spec.cost),
    )
