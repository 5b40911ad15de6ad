"""One builder of the pure policy objects, for the controller service and the simulator.

``service/core/policies.py`` (``agentrt controller serve``) and ``agentrt_sim/registry.py``
(``agentrt bench sim``) both build their scheduler, admission policy, router, dispatcher and
retention policy here, from the same typed pieces (:class:`PolicyConfig`), so a simulated
configuration is the controller's:

* names resolve through the factories (:mod:`agentrt_controller.scheduling.factory`,
  :mod:`agentrt_controller.routing.factory`); unknown names are
  :class:`~agentrt.errors.ConfigError`, never a silent fallback (docs/architecture.md, rule 2);
* **derived parameters** come from the cost model (:class:`~agentrt_controller.cost_model.
  CostModel`, the one that charges service): the ``prefix`` router's and the retention
  policy's ``prefill_s_per_token``, unless given explicitly;
* **memory-aware admission** (:mod:`agentrt_controller.scheduling.memory`) on by default,
  except with an unlimited admission window (the controller then holds nothing back: the
  engine's own queue, as a stock vLLM);
* **block hashes**: a driver fills ``CallFacts.block_hashes`` when :func:`needs_block_hashes` says
  its router reads them (the router declares it), in both drivers alike.

Pure: no I/O, no clock, no service imports.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from agentrt_controller import defaults
from agentrt_controller.admission_window import AdmissionWindow
from agentrt_controller.cost_model import CostModel
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.retention import RetentionConfig, TtlRetentionPolicy
from agentrt_controller.routing import uses_block_hashes
from agentrt_controller.routing.api import Router
from agentrt_controller.routing.factory import build_router as factory_router
from agentrt_controller.scheduling.admission import AdaptiveWindowConfig
from agentrt_controller.scheduling.api import AdmissionPolicy, Scheduler
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_admission as factory_admission
from agentrt_controller.scheduling.factory import build_scheduler as factory_scheduler
from agentrt_controller.scheduling.memory import MemoryAdmission, MemoryAdmissionConfig
from agentrt_controller.scheduling.srpt import SrptOracle
from agentrt_controller.scheduling.tenancy import TenancyConfig

__all__ = [
    "PolicyConfig",
    "build_admission",
    "build_dispatcher",
    "build_memory_admission",
    "build_retention_policy",
    "build_router",
    "build_scheduler",
    "needs_block_hashes",
]

#: A parameter table as a config file gives it (values checked by the factories).
Params = Mapping[str, object]


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """What one controller's dispatcher is built from (every default is the controller's)."""

    #: Scheduler name (``fcfs``, ``mlfq``, ``plas``, ``atlas``, ``srpt``).
    policy: str = defaults.POLICY
    #: Scheduler parameters: a ``SchedulerConfig`` or a table of its fields over the
    #: factory's defaults.
    scheduling: SchedulerConfig | Params = field(default_factory=dict)
    #: Router name (``agentrt_controller.routing.factory.ROUTER_NAMES``).
    router: str = defaults.ROUTER
    #: Router parameters (see :func:`agentrt_controller.routing.factory.build_router`).
    routing: Params = field(default_factory=dict)
    #: Admission window per backend (calls); ``None`` = unlimited; ``"adaptive"`` = the
    #: adaptive window with :attr:`admission` parameters.
    admission_window: AdmissionWindow = defaults.ADMISSION_WINDOW
    #: Adaptive-window parameters (an ``AdaptiveWindowConfig`` or a table of its fields); read
    #: only when :attr:`admission_window` is ``"adaptive"``.
    admission: AdaptiveWindowConfig | Params = field(default_factory=dict)
    #: Memory-aware admission parameters (a ``MemoryAdmissionConfig`` or a table of its
    #: fields; ``enabled=False`` turns it off). Not used with an unlimited window.
    memory_admission: MemoryAdmissionConfig | Params = field(default_factory=dict)
    #: Weighted fair shares between tenants around the scheduler; ``None`` = off.
    tenancy: TenancyConfig | None = None
    #: The process table forgets a program idle this long (seconds).
    idle_timeout_s: float = 3600.0
    #: The true figures per call that clairvoyant SRPT reads (the simulator's ``OracleBook``);
    #: ``None`` = none (the controller: SRPT is refused).
    oracle: SrptOracle | None = None
    #: The cost model that charges service: the source of the derived parameters.
    cost: CostModel = field(default_factory=CostModel)


def build_scheduler(config: PolicyConfig) -> Scheduler:
    """The configured scheduler over a fresh process table (inside fair shares between
    tenants when :attr:`PolicyConfig.tenancy`)."""
    scheduling = config.scheduling
    return factory_scheduler(
        config.policy,
        scheduling if isinstance(scheduling, SchedulerConfig) else dict(scheduling) or None,
        table=ProcessTable(idle_timeout_s=config.idle_timeout_s),
        oracle=config.oracle,
        tenancy=config.tenancy,
    )


def build_admission(config: PolicyConfig) -> AdmissionPolicy:
    """A fixed window (``N`` calls or unlimited) or the adaptive window."""
    if config.admission_window == "adaptive":
        admission = config.admission
        if isinstance(admission, AdaptiveWindowConfig):
            return factory_admission("adaptive", admission)
        return factory_admission("adaptive", dict(admission))
    return factory_admission("fixed", {"window": config.admission_window})


def build_router(config: PolicyConfig) -> Router:
    """The named router; the ``prefix`` router's seconds per prefill token default to the
    cost model's."""
    params = dict(config.routing)
    if config.router.strip().lower() == "prefix":
        params.setdefault("prefill_s_per_token", config.cost.prefill_s_per_token)
    return factory_router(config.router, params or None)


def build_memory_admission(config: PolicyConfig) -> MemoryAdmission | None:
    """The memory-aware admission rule, or ``None`` when it is off or the admission window
    is unlimited (nothing is held at the controller then)."""
    memory = config.memory_admission
    if not isinstance(memory, MemoryAdmissionConfig):
        memory = MemoryAdmissionConfig.from_mapping(memory)
    if not memory.enabled or config.admission_window is None:
        return None
    return MemoryAdmission(memory)


def build_dispatcher(config: PolicyConfig) -> Dispatcher:
    """Scheduler, router, admission policy and memory rule, fresh (they keep state)."""
    return Dispatcher(
        build_scheduler(config),
        build_router(config),
        build_admission(config),
        memory=build_memory_admission(config),
    )


def build_retention_policy(
    options: RetentionConfig | Params,
    cost: CostModel,
    *,
    sharing_tenants: Collection[str] = (),
) -> TtlRetentionPolicy:
    """The TTL retention policy with ``options`` (a ``RetentionConfig``, taken as it is, or a
    table of its fields, whose ``prefill_s_per_token`` defaults to ``cost``'s).
    ``sharing_tenants``: the tenants whose traffic feeds its global prior (none: the simulator,
    whose one tenant learns for itself)."""
    if isinstance(options, RetentionConfig):
        return TtlRetentionPolicy(options, sharing_tenants=sharing_tenants)
    params = dict(options)
    params.setdefault("prefill_s_per_token", cost.prefill_s_per_token)
    return TtlRetentionPolicy(RetentionConfig.from_mapping(params), sharing_tenants=sharing_tenants)


def needs_block_hashes(router: Router) -> bool:
    """Whether a driver must fill ``CallFacts.block_hashes`` for ``router`` (it declares it)."""
    return uses_block_hashes(router)
