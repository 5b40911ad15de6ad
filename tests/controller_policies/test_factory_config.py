"""Building policies by name: every valid name works, everything else is a ConfigError."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission, AdaptiveWindowConfig
from agentrt_controller.scheduling.basic import FcfsScheduler, FixedWindowAdmission
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.scheduling.factory import (
    ADMISSION_NAMES,
    SCHEDULER_NAMES,
    build_admission,
    build_scheduler,
)
from agentrt_controller.scheduling.srpt import OracleBook

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_every_scheduler_name_builds(name: str) -> None:
    table = ProcessTable()
    scheduler = build_scheduler(name, table=table, oracle=OracleBook())
    assert scheduler.name == name
    assert scheduler.table is table


def test_names_are_case_and_space_insensitive() -> None:
    assert build_scheduler(" PLAS ").name == "plas"


def test_unknown_scheduler_lists_valid_names() -> None:
    with pytest.raises(ConfigError) as info:
        build_scheduler("lottery")
    for name in SCHEDULER_NAMES:
        assert name in str(info.value)


def test_srpt_needs_the_oracle() -> None:
    with pytest.raises(ConfigError, match="clairvoyant"):
        build_scheduler("srpt")


def test_fcfs_takes_no_parameters() -> None:
    assert isinstance(build_scheduler("fcfs", {}), FcfsScheduler)
    with pytest.raises(ConfigError, match="fcfs"):
        build_scheduler("fcfs", {"starvation_beta": 3})


def test_mapping_config_is_parsed() -> None:
    scheduler = build_scheduler(
        "atlas", {"boundaries_s": [1, 4], "quanta_tokens": [8, 16, 32], "starvation_beta": 2}
    )
    config: SchedulerConfig = scheduler.config  # type: ignore[attr-defined]
    assert config.boundaries_s == (1.0, 4.0)
    assert config.quanta_tokens == (8, 16, 32)
    assert config.starvation_beta == 2


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"boundaries_s": [2, 1], "quanta_tokens": [1, 2, 3]}, "increasing"),
        ({"boundaries_s": [1, 1], "quanta_tokens": [1, 2, 3]}, "increasing"),
        ({"boundaries_s": [0, 1], "quanta_tokens": [1, 2, 3]}, "> 0"),
        ({"boundaries_s": [1, math.inf], "quanta_tokens": [1, 2, 3]}, "finite"),
        ({"boundaries_s": [1, 2], "quanta_tokens": [1, 2]}, "one quantum per queue"),
        ({"quanta_tokens": [16, 32, 64, 128, 256, 512]}, "one quantum per queue"),
        ({"quanta_tokens": [16, 32, 0, 128, 256]}, ">= 1"),
        ({"quanta_tokens": [16, 32, 1.5, 128, 256]}, "quanta_tokens.2: must be an integer"),
        ({"starvation_beta": 0}, "beta"),
        ({"starvation_beta": -1.0}, "beta"),
        ({"starvation_beta": math.nan}, "beta"),
        ({"starvation_beta": True}, "beta"),
        ({"starvation_check_interval_s": -1}, "interval"),
        ({"beta": 3}, "scheduling.beta: unknown key"),
        ({"boundaries_s": 5}, "scheduling.boundaries_s: input should be a valid tuple"),
    ],
)
def test_bad_scheduler_parameters(params: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_scheduler("plas", params)


def test_single_queue_is_allowed() -> None:
    config = SchedulerConfig(boundaries_s=(), quanta_tokens=(64,))
    assert config.levels == 1 and config.level_for(1e9) == 0


def test_config_object_of_wrong_type() -> None:
    with pytest.raises(ConfigError):
        build_scheduler("plas", 3)  # type: ignore[arg-type]


# --- admission --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ADMISSION_NAMES)
def test_every_admission_name_builds(name: str) -> None:
    assert build_admission(name).name == name


def test_fixed_admission_window() -> None:
    policy = build_admission("fixed", {"window": 4})
    assert isinstance(policy, FixedWindowAdmission) and policy.window == 4
    assert isinstance(build_admission("fixed", {"window": None}), FixedWindowAdmission)


def test_adaptive_admission_from_mapping_and_object() -> None:
    policy = build_admission("adaptive", {"initial_window": 4, "target_waiting": 0})
    assert isinstance(policy, AdaptiveWindowAdmission)
    assert policy.config.initial_window == 4
    config = AdaptiveWindowConfig(max_window=64)
    built = build_admission("adaptive", config)
    assert isinstance(built, AdaptiveWindowAdmission) and built.config is config


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("lifo", None, "valid: fixed, adaptive"),
        ("fixed", {"window": 0}, ">= 1"),
        ("fixed", {"window": "8"}, "integer"),
        ("fixed", {"size": 8}, "unknown fixed"),
        ("fixed", AdaptiveWindowConfig(), "not an adaptive config"),
        ("adaptive", {"window": 8}, "admission.window: unknown key"),
        ("adaptive", {"min_window": 0}, "min_window"),
        ("adaptive", {"initial_window": 500}, "initial_window"),
        ("adaptive", {"decrease_factor": 1.0}, "decrease_factor"),
        ("adaptive", {"increase_step": 0}, "increase_step"),
        ("adaptive", {"target_waiting": -1}, "target_waiting"),
        ("adaptive", {"update_interval_s": 0}, "update_interval_s"),
        ("adaptive", {"max_window": math.inf}, "finite"),
        ("adaptive", {"initial_window": "x"}, "admission.initial_window: must be a number"),
    ],
)
def test_bad_admission_parameters(name: str, params: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_admission(name, params)
