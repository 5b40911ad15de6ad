"""Build schedulers and admission policies by name (docs/architecture.md, design rule 2: unknown
names and bad parameters are :class:`~agentrt.errors.ConfigError`, never a silent fallback).

Schedulers: ``fcfs``, ``mlfq``, ``plas``, ``atlas``, ``gittins`` (PLAS that learns programs'
sizes), ``srpt`` (clairvoyant: only with the
simulator's ``oracle``), each optionally inside fair shares between tenants (``tenancy=``:
:class:`~agentrt_controller.scheduling.tenancy.TenantFairScheduler`, docs/tenancy.md).
Admission: ``fixed`` (``window``: calls or ``None`` = unlimited) and
``adaptive`` (:class:`~agentrt_controller.scheduling.admission.AdaptiveWindowConfig` parameters).
"""

from __future__ import annotations

from collections.abc import Mapping

from agentrt.errors import ConfigError
from agentrt_controller import defaults
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.api import AdmissionPolicy, Scheduler
from agentrt_controller.scheduling.basic import FcfsScheduler, FixedWindowAdmission
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.gittins import GittinsScheduler
from agentrt_controller.scheduling.multilevel import (
    AtlasScheduler,
    MlfqScheduler,
    MultiLevelScheduler,
    PlasScheduler,
)
from agentrt_controller.scheduling.srpt import SrptOracle, SrptScheduler
from agentrt_controller.scheduling.tenancy import TenancyConfig, TenantFairScheduler

__all__ = ["ADMISSION_NAMES", "SCHEDULER_NAMES", "build_admission", "build_scheduler"]

#: Every scheduler name :func:`build_scheduler` knows, in the order benchmarks list them.
SCHEDULER_NAMES = ("fcfs", "mlfq", "plas", "atlas", "gittins", "srpt")
#: Every admission policy name :func:`build_admission` knows.
ADMISSION_NAMES = ("fixed", "adaptive")

#: ``fixed`` admission's window when ``config`` gives none (calls).
_FIXED_WINDOW = 32

_MULTILEVEL: dict[str, type[MultiLevelScheduler]] = {
    "mlfq": MlfqScheduler,
    "plas": PlasScheduler,
    "atlas": AtlasScheduler,
    "gittins": GittinsScheduler,
}


def build_scheduler(
    name: str,
    config: SchedulerConfig | Mapping[str, object] | None = None,
    *,
    table: ProcessTable | None = None,
    oracle: SrptOracle | None = None,
    tenancy: TenancyConfig | Mapping[str, object] | None = None,
) -> Scheduler:
    """A new scheduler.

    ``tenancy``: a :class:`TenancyConfig` (or a mapping of its fields: ``weights``,
    ``default_weight``, ``initial_call_charge_s``, ``enabled``, ``isolation``) puts the policy
    inside weighted fair shares between tenants — one ``name`` scheduler per tenant on the
    shared ``table`` (:class:`TenantFairScheduler`); ``None`` or ``enabled=False`` = the bare
    policy.

    ``config``: a :class:`SchedulerConfig` or a mapping of its fields (unknown keys are
    rejected) applied over :data:`agentrt_controller.defaults.SCHEDULING` (the parameters the
    controller and ``agentrt bench sim`` default to); ``None`` = those defaults. ``fcfs``
    takes no parameters (a non-empty mapping is an error). ``table``: the process table to
    share (a private one when ``None``).
    ``oracle``: the simulator's true figures per call id (:data:`SrptOracle`); required by
    ``srpt``, ``None`` everywhere else (the controller never has one).

    Raises :class:`ConfigError` for an unknown name, bad parameters, or ``srpt`` without
    ``oracle``.
    """
    if tenancy is not None:
        tenants = tenancy if isinstance(tenancy, TenancyConfig) else _tenancy_config(tenancy)
        if tenants.enabled:
            _build_one(name, config, None, oracle)  # a bad policy fails here, not per tenant
            return TenantFairScheduler(
                tenants, lambda shared: _build_one(name, config, shared, oracle), table
            )
    return _build_one(name, config, table, oracle)


def _tenancy_config(values: object) -> TenancyConfig:
    if not isinstance(values, Mapping):
        raise ConfigError(f"tenancy config must be a table, got {type(values).__name__}")
    return TenancyConfig.from_mapping(values)


def _build_one(
    name: str,
    config: SchedulerConfig | Mapping[str, object] | None,
    table: ProcessTable | None,
    oracle: SrptOracle | None,
) -> Scheduler:
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in SCHEDULER_NAMES:
        raise ConfigError(
            f"unknown scheduling policy {name!r}; valid: {', '.join(SCHEDULER_NAMES)}"
        )
    if key == "fcfs":
        if isinstance(config, Mapping) and config:
            raise ConfigError(f"fcfs takes no scheduling parameters, got {sorted(config)}")
        return FcfsScheduler(table)
    if config is None:
        cfg = SchedulerConfig.from_mapping(defaults.SCHEDULING)
    elif isinstance(config, SchedulerConfig):
        cfg = config
    elif isinstance(config, Mapping):
        cfg = SchedulerConfig.from_mapping({**defaults.SCHEDULING, **config})
    else:
        raise ConfigError(f"scheduling config must be a table, got {type(config).__name__}")
    if key == "srpt":
        if oracle is None:
            raise ConfigError(
                "srpt is clairvoyant: it needs each call's true remaining service, which only "
                "the simulator knows (build it there, with the simulator's oracle)"
            )
        return SrptScheduler(oracle, cfg, table)
    return _MULTILEVEL[key](cfg, table)


def build_admission(
    name: str, config: Mapping[str, object] | AdaptiveWindowConfig | None = None
) -> AdmissionPolicy:
    """A new admission policy.

    ``fixed``: ``config`` may hold ``window`` (calls >= 1, or ``None`` = unlimited; default
    32). ``adaptive``: an :class:`AdaptiveWindowConfig` or a mapping of its fields.
    Raises :class:`ConfigError` for an unknown name or bad parameters.
    """
    key = name.strip().lower() if isinstance(name, str) else name
    params: Mapping[str, object] = {}
    if key == "fixed":
        if isinstance(config, AdaptiveWindowConfig):
            raise ConfigError("fixed admission takes {'window': N}, not an adaptive config")
        params = config or {}
        unknown = sorted(set(params) - {"window"})
        if unknown:
            raise ConfigError(f"unknown fixed admission parameter(s) {unknown}; valid: window")
        window = params.get("window", _FIXED_WINDOW)
        if window is None:
            return FixedWindowAdmission(None)
        if isinstance(window, bool) or not isinstance(window, int):
            raise ConfigError(f"admission window must be an integer or None, got {window!r}")
        return FixedWindowAdmission(window)
    if key == "adaptive":
        if isinstance(config, AdaptiveWindowConfig):
            return AdaptiveWindowAdmission(config)
        return AdaptiveWindowAdmission(AdaptiveWindowConfig.from_mapping(config or {}))
    raise ConfigError(f"unknown admission policy {name!r}; valid: {', '.join(ADMISSION_NAMES)}")
