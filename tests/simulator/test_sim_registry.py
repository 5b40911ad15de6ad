"""Names resolve in one place; unknown names fail loudly with the valid ones listed."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.scheduling.factory import SCHEDULER_NAMES
from agentrt_sim.registry import PolicySpec, build_policies, parse_window, resolve_retention
from agentrt_sim.retention import NoRetention
from agentrt_sim.workloads.generate import build_generator, parse_workload_params

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("name", SCHEDULER_NAMES)
def test_every_controller_scheduler_builds_for_the_simulator(name: str) -> None:
    policies = build_policies(PolicySpec(name, retention="off"))
    assert policies.dispatcher.scheduler.name == name
    assert isinstance(policies.retention, NoRetention)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (PolicySpec("lottery"), "unknown scheduling policy 'lottery'; valid: fcfs"),
        (PolicySpec(router="random"), "unknown router 'random'; valid: round_robin, least_loaded"),
        (PolicySpec(retention="sometimes"), "unknown retention 'sometimes'; valid: on, off"),
        (PolicySpec("plas", scheduler_options={"colour": 1}), r"scheduling\.colour: unknown key"),
    ],
)
def test_bad_names_and_options_raise_config_error(spec: PolicySpec, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_policies(spec)


def test_admission_window_values() -> None:
    assert parse_window("32") == 32
    assert parse_window("unlimited") is None
    assert parse_window("adaptive") == "adaptive"
    for bad in ("0", "-3", "lots"):
        with pytest.raises(ConfigError, match="admission window"):
            parse_window(bad)
    assert build_policies(PolicySpec(admission_window="adaptive")).dispatcher.admission.name


def test_retention_off_resolves() -> None:
    assert resolve_retention("OFF") == "off"


def test_retention_on_is_the_controllers_ttl_policy() -> None:
    from agentrt_controller.retention import TtlRetentionPolicy

    assert resolve_retention("on") == "ttl"
    assert isinstance(build_policies(PolicySpec(retention="on")).retention, TtlRetentionPolicy)


def test_workload_names_and_params() -> None:
    with pytest.raises(ConfigError, match="unknown workload 'chat'; valid: chatbot"):
        build_generator("chat")
    assert parse_workload_params(["chatbot.think_mean_s=0", "mcts.children=3"]) == {
        "chatbot": {"think_mean_s": 0.0},
        "mcts": {"children": 3},
    }
    for bad, message in (
        ("chatbot.colour=1", "no field 'colour'"),
        ("robot.x=1", "unknown kind 'robot'"),
        ("mcts.children=2.5", "not a int"),
        ("think=0", "expected KIND.FIELD=VALUE"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_workload_params([bad])
