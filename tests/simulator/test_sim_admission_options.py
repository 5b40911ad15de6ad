"""`agentrt bench sim --admission-option KEY=VALUE` (the adaptive window's parameters, as the
controller's ``admission`` table) and `--scrape-interval S` (how often the simulated controller
refreshes the engines' gauges the window steers by)."""

from __future__ import annotations

import argparse

import pytest

from agentrt.errors import ConfigError
from agentrt_controller import defaults
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission
from agentrt_sim.cli import _bench_and_specs, register
from agentrt_sim.registry import build_policies

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
