"""`agentrt bench sim --admission-option KEY=VALUE` (the adaptive window's parameters, as the
controller's ``admission`` table), `--scrape-interval S` (how often the simulated controller
refreshes the engines' gauges the window steers by) and `--memory-option KEY=VALUE`
(memory-aware admission's parameters, the controller's ``memory_admission`` table), with the
default short-context threshold on a tiny engine (docs/scheduling.md, "The short-context
threshold")."""

from __future__ import annotations

import argparse

import pytest

from agentrt.errors import ConfigError
from agentrt_controller import defaults
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.cli import _bench_and_specs, register
from agentrt_sim.registry import PolicySpec, build_policies
from agentrt_sim.runner import BenchConfig, run_comparison

pytestmark = pytest.mark.timeout(30)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["bench", "sim", *argv])


def test_defaults_are_the_controllers_and_a_fresh_sample_per_decision() -> None:
    bench, (spec,) = _bench_and_specs(_parse(), 1.0)
    assert dict(spec.admission_options) == dict(defaults.ADMISSION)
    assert bench.scrape_interval_s == 0.0


def test_admission_options_reach_the_window() -> None:
    args = _parse(
        "--admission-option", "slow_start=false", "--admission-option", "target_waiting=4"
    )
    _, (spec,) = _bench_and_specs(args, 1.0)
    assert dict(spec.admission_options) == {"slow_start": False, "target_waiting": 4}
    admission = build_policies(spec).dispatcher.admission
    assert isinstance(admission, AdaptiveWindowAdmission)
    assert not admission.config.slow_start and admission.config.target_waiting == 4


def test_scrape_interval() -> None:
    bench, _ = _bench_and_specs(_parse("--scrape-interval", "1"), 1.0)
    assert bench.scrape_interval_s == 1.0 and bench.sim_config().scrape_interval_s == 1.0
    with pytest.raises(ConfigError, match="--scrape-interval must be >= 0"):
        _bench_and_specs(_parse("--scrape-interval", "-1"), 1.0)


def test_a_bad_admission_option_is_refused_naming_it() -> None:
    _, (spec,) = _bench_and_specs(_parse("--admission-option", 'slow_start="yes"'), 1.0)
    with pytest.raises(ConfigError, match=r"admission\.slow_start"):
        build_policies(spec)


def test_admission_options_need_the_adaptive_window() -> None:
    args = _parse("--admission-window", "32", "--admission-option", "slow_start=false")
    with pytest.raises(ConfigError, match="adaptive only"):
        _bench_and_specs(args, 1.0)


def test_memory_options_reach_the_rule() -> None:
    _, (spec,) = _bench_and_specs(_parse(), 1.0)
    memory = build_policies(spec).dispatcher.memory
    assert memory is not None and memory.config.min_context_tokens is None  # per backend
    args = _parse("--memory-option", "min_context_tokens=4096", "--memory-option", "max_passed=8")
    _, (spec,) = _bench_and_specs(args, 1.0)
    assert dict(spec.memory_admission) == {"min_context_tokens": 4096, "max_passed": 8}
    memory = build_policies(spec).dispatcher.memory
    assert memory is not None
    assert (memory.config.min_context_tokens, memory.config.max_passed) == (4096, 8)


def test_a_bad_memory_option_is_refused_naming_it() -> None:
    _, (spec,) = _bench_and_specs(_parse("--memory-option", "min_context=4096"), 1.0)
    with pytest.raises(ConfigError, match="min_context"):
        build_policies(spec)
    args = _parse("--admission-window", "unlimited", "--memory-option", "enabled=false")
    with pytest.raises(ConfigError, match="unlimited window"):
        _bench_and_specs(args, 1.0)


def _completed(memory: dict[str, object]) -> object:
    # 120 GPU blocks (1,920 tokens) for ReAct programs: their contexts evict each other
    engine = EngineConfig(max_model_len=131072, num_gpu_blocks=120)
    bench = BenchConfig(workload="react", rate_per_s=1.0, duration_s=60, seed=3, engine=engine)
    spec = PolicySpec(memory_admission=memory)
    return run_comparison(bench, [spec])[0].summary["programs_completed"]


def test_a_tiny_engines_short_contexts_are_never_held() -> None:
    # The default threshold here is its floor, 2,048 tokens (a thirty-second of this engine's
    # 1,920 is 60): ReAct's short contexts stay out of the ledger, and as many programs finish
    # as with the rule off. Counting every context holds programs back for nothing.
    default = _completed({})
    assert default == _completed({"enabled": False})
    assert _completed({"min_context_tokens": 0}) < default
