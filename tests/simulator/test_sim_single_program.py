"""A single program on an idle engine: E2E = its modelled step times + its tool times."""

from __future__ import annotations

import pytest
from simtest_helpers import RecordingFcfs, react_program, simulate

from agentrt_emulator.core.profiles import get_profile, step_time_s
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.sim import SimConfig

pytestmark = pytest.mark.timeout(30)


def _call_time(profile_name: str, prompt: int, output: int) -> float:
    """Prefill of the whole prompt (no cache) in one step, then output-1 decode steps."""
    profile = get_profile(profile_name)
    total = step_time_s(profile, prompt, 0, prompt)  # the prefill step samples token 1
    for generated in range(1, output):
        total += step_time_s(profile, 0, 1, prompt + generated)
    return total


@pytest.mark.parametrize("profile", ["a100-llama3-8b", "h100-llama3-8b"])
def test_e2e_is_the_sum_of_step_times_and_tool_times(profile: str) -> None:
    outputs, tools, observation, system, root = (5, 7, 3), (0.5, 1.25), 40, 64, 20
    program = react_program(
        outputs=outputs, tool_s=tools, observation=observation, system=system, root=root
    )
    sim = simulate(
        [program],
        SimConfig(profile=profile, engine=EngineConfig(enable_prefix_caching=False)),
    )
    (record,) = sim.record.programs
    expected = sum(tools)
    prompt = system + root
    for index, output in enumerate(outputs):
        if index:
            prompt += outputs[index - 1] + observation  # previous output + observation
        expected += _call_time(profile, prompt, output)
    assert record.e2e_s == pytest.approx(expected, rel=1e-12)
    assert record.wait_s == pytest.approx(0.0, abs=1e-12)
    assert record.tool_s == pytest.approx(sum(tools), rel=1e-12)
    assert record.exec_s == pytest.approx(expected - sum(tools), rel=1e-12)


def test_unit_step_program_takes_one_second_per_output_token_plus_tools() -> None:
    program = react_program(outputs=(4, 1, 6), tool_s=(2.0, 0.25))
    sim = simulate([program], SimConfig(profile="unit-step"))
    (record,) = sim.record.programs
    assert record.e2e_s == 4 + 1 + 6 + 2.0 + 0.25
    assert record.output_tokens == 11
    assert record.token_latency_s == record.e2e_s / 11


def test_later_calls_hit_the_prefix_cache_and_are_charged_only_uncached_work() -> None:
    scheduler = RecordingFcfs()
    program = react_program(outputs=(40, 40, 40), observation=64, system=128, root=32)
    sim = simulate([program], SimConfig(profile="a100-llama3-8b"), scheduler=scheduler)
    (record,) = sim.record.programs
    # call 2 extends call 1's prompt + output: all its full blocks but the last are cached
    assert record.cached_tokens > 0
    assert record.cached_tokens / record.prompt_tokens > 0.5
    charged = [scheduler.charged[c.facts.call_id] for c in scheduler.submitted]
    assert charged[1] < charged[0]  # same output, far fewer uncached prompt tokens
