"""`agentrt bench sim` with no policy option simulates what `agentrt controller serve
--backend URL` runs: both read agentrt_controller.defaults, and this test keeps them equal."""

from __future__ import annotations

import argparse

import pytest

from agentrt_controller import defaults
from agentrt_controller.cost_model import CostModel
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.service.config import ControllerConfig, load_config
from agentrt_controller.service.core.policies import build_dispatcher
from agentrt_sim.cli import _bench_and_specs, register
from agentrt_sim.registry import PolicySpec, build_policies

pytestmark = pytest.mark.timeout(30)


def _bench_sim_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["bench", "sim", *argv])


def test_bench_sim_parses_to_the_controllers_defaults() -> None:
    config = load_config(env={}, overrides={"backends": ["http://127.0.0.1:8000"]})
    bench, (spec,) = _bench_and_specs(_bench_sim_args(), 1.0)
    assert spec.policy == config.policy == defaults.POLICY
    assert spec.admission_window == config.admission_window == defaults.ADMISSION_WINDOW
    assert spec.router == config.router == defaults.ROUTER
    assert spec.retention == config.retention == defaults.RETENTION
    assert dict(spec.scheduler_options) == dict(defaults.SCHEDULING) == {}
    assert config.scheduling == SchedulerConfig.from_mapping(spec.scheduler_options)
    assert dict(spec.admission_options) == dict(defaults.ADMISSION)
    assert config.admission == AdaptiveWindowConfig.from_mapping(spec.admission_options)
    # Priority passthrough: off for the controller's backends, so the simulated engines run
    # the FCFS queue of a stock vLLM (which takes no request priority).
    (backend,) = config.backends
    assert backend.priority is defaults.PRIORITY is False
    assert bench.engine.scheduling_policy == defaults.ENGINE_POLICY == "fcfs"
    assert PolicySpec() == spec


def test_both_sides_build_the_same_policy_objects() -> None:
    config = ControllerConfig()
    service = build_dispatcher(config, config.cost)
    simulated = build_policies(PolicySpec()).dispatcher
    assert service.scheduler.name == simulated.scheduler.name == defaults.POLICY
    assert isinstance(service.admission, AdaptiveWindowAdmission)
    assert isinstance(simulated.admission, AdaptiveWindowAdmission)
    assert service.admission.config == simulated.admission.config
    assert type(service.router) is type(simulated.router)
    assert simulated.scheduler.snapshot(0.0) == build_scheduler(defaults.POLICY).snapshot(0.0)


def test_program_scheduling_is_on_by_default() -> None:
    assert defaults.POLICY != "fcfs"
    assert defaults.ADMISSION_WINDOW == "adaptive"  # sized from the backend, not a constant


def test_without_rate_each_workload_runs_at_its_table_rate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from agentrt.cli import main
    from agentrt_sim.rates import DEFAULT_RATES, default_rate
    from agentrt_sim.workloads.generate import WORKLOAD_NAMES

    assert set(DEFAULT_RATES) == set(WORKLOAD_NAMES)
    assert all(rate > 0 for rate in DEFAULT_RATES.values())
    argv = ["bench", "sim", "--workload", "react", "--duration", "4", "--json", "--no-progress"]
    assert main(argv) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["rate"] == default_rate("react")
    assert (result["policy"], result["router"]) == (defaults.POLICY, defaults.ROUTER)
    assert result["admission_window"] == defaults.ADMISSION_WINDOW


@pytest.mark.parametrize(("uncached", "generated"), [(0, 1), (1000, 0), (4321, 77)])
def test_bench_sim_charges_what_the_controller_charges_by_default(
    uncached: int, generated: int
) -> None:
    from agentrt_sim.cli import _cost

    config = load_config(env={}, overrides={"backends": ["http://127.0.0.1:8000"]})
    controller = config.cost
    assert controller == CostModel.from_mapping(defaults.COST)
    sim = _cost(_bench_sim_args())
    assert sim is not None
    assert sim(uncached, generated) == pytest.approx(controller.service_s(uncached, generated))
    # `--cost roofline` leaves the charge to the engine profile's roofline (None here).
    assert _cost(_bench_sim_args("--cost", "roofline")) is None
