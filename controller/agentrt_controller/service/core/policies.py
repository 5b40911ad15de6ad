"""Builds the pure policy objects the service drives from its configuration.

Schedulers and admission policies come from :mod:`agentrt_controller.scheduling.factory` (the same
factory the simulator uses); routers are chosen by name here. Unknown names are
:class:`ConfigError`, never a silent fallback (docs/architecture.md, "Design rules", rule 2).
"""

from __future__ import annotations

from agentrt.errors import ConfigError
from agentrt_controller.cost_model import CostModel
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.retention import RetentionConfig, TtlRetentionPolicy
from agentrt_controller.routing.api import Router
from agentrt_controller.routing.factory import build_router as factory_router
from agentrt_controller.scheduling.api import AdmissionPolicy, Scheduler
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_admission as factory_admission
from agentrt_controller.scheduling.factory import build_scheduler as factory_scheduler
from agentrt_controller.scheduling.isolation import IsolationConfig
from agentrt_controller.scheduling.tenancy import TenancyConfig
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.clock import Clock
from agentrt_controller.service.core.pool import BackendPool
from agentrt_controller.service.core.retention import RetentionExecutor
from agentrt_controller.service.core.tenants import TenantDirectory
from agentrt_controller.service.telemetry.metrics import ServiceMetrics

__all__ = ["build_dispatcher", "build_retention", "fair_share_on"]


def fair_share_on(config: ControllerConfig, tenants: TenantDirectory | None) -> bool:
    """Whether calls are scheduled in fair shares between tenants: ``fair_share = "on"``, or
    ``"auto"`` (the default) with more than one tenant configured (docs/security.md)."""
    if config.fair_share == "auto":
        return tenants is not None and len(tenants.tenants) > 1
    return config.fair_share == "on"


def build_scheduler(config: ControllerConfig, tenants: TenantDirectory | None = None) -> Scheduler:
    """The configured policy; inside weighted fair shares between tenants (weights from the
    key file) when :func:`fair_share_on` (Autellix's PLAS / ATLAS then order each tenant's
    own calls only: ``scheduling/tenancy.py``)."""
    table = ProcessTable(idle_timeout_s=config.program_idle_timeout_s)
    tenancy = None
    if fair_share_on(config, tenants):
        tenancy = TenancyConfig(
            weights=tenants.weights() if tenants is not None else {},
            isolation=IsolationConfig.from_mapping(dict(config.tenant_isolation))
            if config.tenant_isolation
            else IsolationConfig(enabled=False),
        )
    return factory_scheduler(config.policy, dict(config.scheduling), table=table, tenancy=tenancy)


def build_router(config: ControllerConfig, cost_model: CostModel) -> Router:
    """The router named by ``config.router`` with ``config.routing``; the ``prefix`` router's
    seconds per prefill token default to ``cost_model``'s (the configured cost model)."""
    params = dict(config.routing)
    if config.router.strip().lower() == "prefix" and "prefill_s_per_token" not in params:
        params["prefill_s_per_token"] = cost_model.prefill_s_per_token
    return factory_router(config.router, params)


def build_admission(config: ControllerConfig) -> AdmissionPolicy:
    window = config.admission_window
    if window == "adaptive":
        return factory_admission("adaptive", dict(config.admission))
    if config.admission:
        raise ConfigError("admission options apply to admission_window=adaptive only")
    return factory_admission("fixed", {"window": window})


def build_dispatcher(
    config: ControllerConfig, cost_model: CostModel, tenants: TenantDirectory | None = None
) -> Dispatcher:
    """The dispatcher of ``config``; ``cost_model`` is ``config.cost`` parsed once by the
    caller (:meth:`CostModel.from_mapping`), read by the router's defaults."""
    return Dispatcher(
        build_scheduler(config, tenants), build_router(config, cost_model), build_admission(config)
    )


def build_retention(
    config: ControllerConfig,
    cost_model: CostModel,
    dispatcher: Dispatcher,
    pool: BackendPool,
    clock: Clock,
    metrics: ServiceMetrics,
) -> RetentionExecutor:
    """The retention driver (``config.retention == "on"``) for ``dispatcher`` and ``pool`` on
    ``clock``: the policy's ``prefill_s_per_token`` defaults to ``cost_model``'s (the
    configured cost model, parsed once by the caller)."""
    options = dict(config.retention_options)
    options.setdefault("prefill_s_per_token", cost_model.prefill_s_per_token)
    policy = TtlRetentionPolicy(RetentionConfig.from_mapping(options))
    return RetentionExecutor(policy, dispatcher, pool, clock, on_error=metrics.internal_errors.inc)
