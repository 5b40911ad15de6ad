"""The controller service's policy objects, from its configuration.

The objects themselves are built by :mod:`agentrt_controller.policies` — the builder the
simulator uses too (same factories, same parameters derived from the cost model, block hashes
decided by the router). This module only maps :class:`ControllerConfig` onto it (tenants from
the key file, the service's checks) and wraps the retention policy in the service's executor.
Unknown names are :class:`ConfigError`, never a silent fallback (docs/architecture.md,
"Design rules", rule 2).
"""

from __future__ import annotations

from agentrt_controller import policies
from agentrt_controller.cost_model import CostModel
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.tenancy import TenancyConfig
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.clock import Clock
from agentrt_controller.service.core.pool import BackendPool
from agentrt_controller.service.core.retention import RetentionExecutor
from agentrt_controller.service.core.tenants import TenantDirectory
from agentrt_controller.service.telemetry.metrics import ServiceMetrics

__all__ = ["build_dispatcher", "build_retention", "fair_share_on", "policy_config"]


def fair_share_on(config: ControllerConfig, tenants: TenantDirectory | None) -> bool:
    """Whether calls are scheduled in fair shares between tenants: ``fair_share = "on"``, or
    ``"auto"`` (the default) with more than one tenant configured (docs/security.md)."""
    if config.fair_share == "auto":
        return tenants is not None and len(tenants.tenants) > 1
    return config.fair_share == "on"


def policy_config(
    config: ControllerConfig, cost_model: CostModel, tenants: TenantDirectory | None = None
) -> policies.PolicyConfig:
    """The builder's view of ``config`` (``cost_model``: ``config.cost``): Autellix's PLAS /
    ATLAS inside weighted fair shares between tenants (weights from the key file) when
    :func:`fair_share_on` (``scheduling/tenancy.py``)."""
    tenancy = None
    if fair_share_on(config, tenants):
        tenancy = TenancyConfig(
            weights=tenants.weights() if tenants is not None else {},
            isolation=config.tenant_isolation,
        )
    return policies.PolicyConfig(
        policy=config.policy,
        scheduling=config.scheduling,
        router=config.router,
        routing=config.routing,
        admission_window=config.admission_window,
        admission=config.admission,
        memory_admission=config.memory_admission,
        tenancy=tenancy,
        idle_timeout_s=config.program_idle_timeout_s,
        cost=cost_model,
    )


def build_dispatcher(
    config: ControllerConfig, cost_model: CostModel, tenants: TenantDirectory | None = None
) -> Dispatcher:
    """The dispatcher of ``config``; ``cost_model`` is ``config.cost``, read by the router's
    defaults."""
    return policies.build_dispatcher(policy_config(config, cost_model, tenants))


def build_retention(
    config: ControllerConfig,
    cost_model: CostModel,
    dispatcher: Dispatcher,
    pool: BackendPool,
    clock: Clock,
    metrics: ServiceMetrics,
    tenants: TenantDirectory | None = None,
) -> RetentionExecutor:
    """The retention executor (``config.retention == "on"``) for ``dispatcher`` and ``pool``
    on ``clock``: the policy's ``prefill_s_per_token`` defaults to ``cost_model``'s
    (``config.cost``: :attr:`ControllerConfig.retention_config`); its global prior learns
    from the ``tenants`` with ``share_statistics`` only (docs/tenancy.md)."""
    sharing = tenants.sharing_statistics() if tenants is not None else frozenset()
    policy = policies.build_retention_policy(
        config.retention_config, cost_model, sharing_tenants=sharing
    )

    def on_error(action: str) -> None:
        metrics.retention_errors.inc(1.0, action)

    executor = RetentionExecutor(
        policy,
        dispatcher,
        pool,
        clock,
        kept_bytes_per_tenant=config.retention_config.kept_bytes_per_tenant,
        hardware_profile=config.cost.profile,
        on_error=on_error,
    )
    if dispatcher.memory is not None:  # admission counts the contexts retention pins
        dispatcher.memory.pinned = executor.driver.pinned
    return executor
