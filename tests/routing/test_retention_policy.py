"""The retention policy: duration and return models, the TTL decision rule, config checks."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionConfig, ToolWaitFacts, TtlRetentionPolicy
from agentrt_controller.retention.durations import DurationModel, ToolDurations
from agentrt_controller.retention.policy import reload_s_per_token_of
from agentrt_controller.retention.returns import ReturnModel

pytestmark = pytest.mark.timeout(60)

#: A program of the default session.
K = ProgramKey.untagged


def _facts(**kw: object) -> ToolWaitFacts:
    values: dict[str, object] = {
        "program": K("p"),
        "thread_id": "main",
        "node_id": "t1",
        "kind": "tool",
        "name": "search",
        "predicted_duration_s": None,
        "context_tokens": 2000,
        "backend_id": "b0",
        "kv_cache_usage": 0.2,
    }
    values.update(kw)
    return ToolWaitFacts(**values)  # type: ignore[arg-type]


def test_empirical_duration_model() -> None:
    model = DurationModel([4.0, 1.0, 2.0, 3.0])
    assert model.empirical and model.mean_s == 2.5
    assert [model.quantile(q) for q in (0.25, 0.5, 0.75, 0.99)] == [1.0, 2.0, 3.0, 4.0]
    assert [model.cdf(t) for t in (-1, 0.5, 2.0, 10)] == [0.0, 0.0, 0.5, 1.0]
    assert model.expected_min(2.5) == pytest.approx((1 + 2 + 2.5 + 2.5) / 4)
    assert model.expected_min(0) == 0.0


def test_exponential_fallback_model() -> None:
    model = DurationModel(mean_s=2.0)
    assert not model.empirical
    assert model.quantile(0.5) == pytest.approx(2.0 * math.log(2))
    assert model.cdf(model.quantile(0.9)) == pytest.approx(0.9)
    assert model.expected_min(1e9) == pytest.approx(2.0)
    with pytest.raises(ConfigError):
        DurationModel()


def test_tool_history_needs_min_samples_then_is_empirical() -> None:
    history = ToolDurations(size=3, min_samples=2, default_mean_s=5.0)
    assert history.model("x").mean_s == 5.0
    assert history.model("x", predicted_mean_s=1.5).mean_s == 1.5  # the client's prediction
    history.record("x", 1.0)
    history.record("x", float("nan"))  # ignored
    assert not history.model("x").empirical
    for value in (2.0, 3.0, 4.0):
        history.record("x", value)
    model = history.model("x")
    assert model.empirical and model.samples == [2.0, 3.0, 4.0]  # ring of the last 3


def test_return_model_learns_per_key() -> None:
    returns = ReturnModel(prior_returned=4, prior_ended=1)
    assert returns.probability("k") == pytest.approx(0.8)
    returns.wait_started(K("p"), "main", "k")
    returns.call_arrived(K("p"), "main")
    returns.wait_started(K("p"), "main", "k")
    returns.wait_started(K("p"), "main", "k")  # a new wait: the previous one returned
    returns.program_ended(K("p"))
    assert returns.counts("k") == (2, 1)
    returns.call_arrived(K("p"), "main")  # nothing pending: no effect
    assert returns.probability("k") == pytest.approx(6 / 8)


def test_without_a_capacity_the_window_covers_the_tail_and_nothing_is_pinned() -> None:
    policy = TtlRetentionPolicy(RetentionConfig(slack_s=0.5))
    for d in range(1, 101):
        policy.durations.record("search", d / 10)  # 0.1 .. 10 s
    decision = policy.decide(_facts(kv_cache_usage=0.3))
    assert (decision.reason, decision.pin) == ("retain", False)
    assert decision.ttl_s == pytest.approx(9.5 + 0.5)  # the 0.95 quantile + slack
    assert decision.p_return_in_ttl == pytest.approx(0.8)  # the prior return probability
    assert decision.expected_benefit_s == decision.expected_cost_s == 0.0


def _long_tool_policy() -> TtlRetentionPolicy:
    """A tool that takes 18-22 s; churn 10,000 tokens/s; 200,000 tokens of KV."""
    policy = TtlRetentionPolicy(RetentionConfig(kv_capacity_tokens=200_000, slack_s=0.5))
    for i in range(21):
        policy.durations.record("search", 18.0 + i * 0.2)
    return policy


@pytest.mark.parametrize(
    ("usage", "reason", "pin", "ttl_range"),
    [
        # R = 200k * 0.95 / 10k = 19 s: the tool mostly outlasts the LRU and holding the
        # context costs 0.5 * 20 / 19 of its recompute < 0.8 gained: pin for the tail.
        (0.05, "pin", True, (21.0, 22.6)),
        # R = 16 s: still worth a pin (gain 0.8, cost 0.5 * 20 / 16 = 0.63).
        (0.2, "pin", True, (21.0, 22.6)),
        # R = 8 s: holding for 20 s costs more than recomputing: no pin, and the window
        # shrinks to R (after that the context is likely gone, so no lane priority either).
        (0.6, "retain", False, (8.0, 8.0)),
    ],
)
def test_pins_only_where_waits_outlast_the_lru_and_holding_pays(
    usage: float, reason: str, pin: bool, ttl_range: tuple[float, float]
) -> None:
    decision = _long_tool_policy().decide(_facts(kv_cache_usage=usage))
    assert (decision.reason, decision.pin) == (reason, pin)
    assert ttl_range[0] - 1e-9 <= decision.ttl_s <= ttl_range[1] + 1e-9
    if pin:
        assert decision.expected_benefit_s > decision.expected_cost_s > 0


def test_short_waits_under_free_memory_are_not_pinned() -> None:
    policy = TtlRetentionPolicy(RetentionConfig(kv_capacity_tokens=1_000_000))
    for value in (1.0, 2.0, 3.0):
        policy.durations.record("search", value)
    decision = policy.decide(_facts(kv_cache_usage=0.1))  # R = 90 s >> 3 s
    assert (decision.reason, decision.pin) == ("retain", False)
    assert decision.ttl_s == pytest.approx(3.5)


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        ({"backend_id": None}, "no_backend"),
        ({"context_tokens": 10}, "short_context"),
        # No memory-full gate any more: a full engine still gets a window (R is short) ...
        ({"kv_cache_usage": 0.9, "kv_capacity_tokens": 1_000_000}, "retain"),
        ({"kv_cache_usage": None}, "retain"),
        # ... and nothing survives a full engine without a CPU tier: the context is dropped.
        ({"kv_cache_usage": 1.0, "kv_capacity_tokens": 20_000}, "not_worth_it"),
    ],
)
def test_decision_gates(facts: dict[str, object], reason: str) -> None:
    assert TtlRetentionPolicy().decide(_facts(**facts)).reason == reason


def _coding_policy(**config: object) -> TtlRetentionPolicy:
    """A tool of 2-6 s; 470,000 tokens of KV (one A100 with Llama-3-8B)."""
    settings = RetentionConfig.from_mapping({"kv_capacity_tokens": 470_000, **config})
    policy = TtlRetentionPolicy(settings)
    for i in range(21):
        policy.durations.record("search", 2.0 + i * 0.2)
    return policy


def test_a_full_engine_pins_a_long_context_due_back_soon() -> None:
    """The case the old ``u + C/M >= max_usage`` gate refused: an 80 K context, memory full."""
    policy = _coding_policy()
    decision = policy.decide(_facts(context_tokens=80_000, kv_cache_usage=0.97))
    assert (decision.reason, decision.pin) == ("pin", True)
    # the saving: an 8 s recompute, likely; the cost: 17 % of the engine for ~4 s
    assert decision.expected_benefit_s > decision.expected_cost_s > 0
    assert decision.expected_return_s is not None
    assert 2.0 <= decision.expected_return_s <= decision.ttl_s <= 6.5
    # the same wait of a tool taking minutes: holding 17 % of the engine costs too much
    slow = _coding_policy()
    for i in range(21):
        slow.durations.record("build", 100.0 + i)
    assert not slow.decide(_facts(name="build", context_tokens=80_000, kv_cache_usage=0.97)).pin


def test_with_a_cpu_tier_the_context_is_let_offload_unless_the_return_is_very_soon() -> None:
    """Reload at 25 GB/s costs ~0.4 s for 80 K tokens instead of an 8 s recompute."""
    reload = reload_s_per_token_of("a100-llama3-8b")
    assert reload == pytest.approx(131072 / 25e9)
    facts = _facts(context_tokens=80_000, kv_cache_usage=0.97, reload_s_per_token=reload)
    assert not _coding_policy().decide(facts).pin  # let the engine offload it
    # the window counts the CPU tier: the context survives there
    tiered = _coding_policy().decide(replace(facts, cpu_kv_capacity_tokens=500_000))
    assert (tiered.reason, tiered.ttl_s) == ("retain", pytest.approx(5.8 + 0.5))  # q95 + slack
    # the configured rate stands in for a backend that does not say
    configured = _coding_policy(reload_s_per_token=reload)
    assert not configured.decide(_facts(context_tokens=80_000, kv_cache_usage=0.97)).pin
    # a return within half a second is pinned even so: holding 17 % of the engine for 0.4 s
    # costs less than the 0.42 s reload (with the engine this full, R = 0.005 * 470 K / 10 K
    # = 0.24 s: the LRU would not keep it)
    quick = _coding_policy()
    for i in range(21):
        quick.durations.record("grep", 0.3 + i * 0.01)
    soon = quick.decide(replace(facts, name="grep", kv_cache_usage=0.995))
    assert soon.pin and soon.expected_cost_s < soon.expected_benefit_s < 0.42


def test_the_queueing_delay_of_evicted_programs_tips_the_balance() -> None:
    policy = _coding_policy(queue_weight=1.0)
    for i in range(21):
        policy.durations.record("test", 40.0 + i)  # 40-60 s
    facts = _facts(name="test", context_tokens=80_000, kv_cache_usage=0.97)
    assert not policy.decide(facts).pin  # 8 s of recompute < holding 17 % for ~50 s
    assert policy.decide(replace(facts, queue_wait_s=60.0)).pin
    unweighted = _coding_policy(queue_weight=0.0)
    for i in range(21):
        unweighted.durations.record("test", 40.0 + i)
    assert not unweighted.decide(replace(facts, queue_wait_s=60.0)).pin


def test_pins_never_hold_more_than_their_share_of_the_memory() -> None:
    policy = _coding_policy(max_pinned_fraction=0.5)
    facts = _facts(context_tokens=80_000, kv_cache_usage=0.97)
    assert policy.decide(replace(facts, pinned_tokens=150_000)).pin  # 230 K <= 235 K
    held = policy.decide(replace(facts, pinned_tokens=160_000))  # 240 K > 235 K
    assert not held.pin and held.reason in {"retain", "not_worth_it"}
    assert not policy.decide(replace(facts, context_tokens=480_000)).pin  # bigger than M


@settings(max_examples=60, deadline=None)
@given(
    low=st.floats(0.0, 0.94),
    high=st.floats(0.0, 0.94),
    capacity=st.one_of(st.none(), st.integers(10_000, 2_000_000)),
    samples=st.lists(st.floats(0.05, 60.0), min_size=3, max_size=40),
)
def test_more_pressure_never_means_a_longer_unpinned_window(
    low: float, high: float, capacity: int | None, samples: list[float]
) -> None:
    low, high = sorted((low, high))
    policy = TtlRetentionPolicy(RetentionConfig(kv_capacity_tokens=capacity))
    for value in samples:
        policy.durations.record("search", value)
    relaxed = policy.decide(_facts(kv_cache_usage=low, context_tokens=500))
    pressed = policy.decide(_facts(kv_cache_usage=high, context_tokens=500))
    for decision in (relaxed, pressed):
        assert 0.0 <= decision.ttl_s <= policy.config.max_ttl_s
        assert 0.0 <= decision.p_return_in_ttl <= 1.0
        assert not decision.pin or capacity is not None  # no capacity, no pins
    if not relaxed.pin and not pressed.pin:
        assert pressed.ttl_s <= relaxed.ttl_s + 1e-9


def test_programs_that_rarely_return_are_not_retained() -> None:
    policy = TtlRetentionPolicy()
    for i in range(20):  # the "deploy" tool always ends the program
        policy.on_wait_start(_facts(program=K(f"p{i}"), name="deploy"), float(i))
        policy.on_wait_end(K(f"p{i}"), "main", "t1", 1.0, float(i) + 1)
        policy.on_program_end(K(f"p{i}"), float(i) + 1)
    assert policy.decide(_facts(name="deploy")).reason == "unlikely_return"
    # The kind of program is part of the key when known.
    kind = _facts(name="deploy", program_kind="release-bot")
    assert policy.decide(kind).reason == "retain"
    assert policy.snapshot()["decisions"] == {"retain": 16, "unlikely_return": 4}
    assert policy.snapshot()["open_waits"] == 0


def test_the_policy_learns_tool_durations_from_wait_ends() -> None:
    policy = TtlRetentionPolicy(RetentionConfig(min_samples=3, cover_quantile=0.5, slack_s=0.0))
    for i in range(3):
        policy.on_wait_start(_facts(node_id=f"t{i}"), 0.0)
        policy.on_call_arrived(K("p"), "main", 0.0)
        policy.on_wait_end(K("p"), "main", f"t{i}", 2.0 + i, 1.0)
    assert policy.durations.count("search") == 3
    assert policy.decide(_facts()).ttl_s == pytest.approx(3.0)
    policy.on_wait_end(K("p"), "main", "unknown", 9.0, 2.0)  # never started: ignored
    assert policy.durations.count("search") == 3


@pytest.mark.parametrize(
    "values",
    [
        {"quantiles": ()},
        {"quantiles": (0.5, 1.0)},
        {"max_usage": 0.9},  # replaced by the cost comparison: an unknown key now
        {"max_pinned_fraction": 0},
        {"max_pinned_fraction": 1.5},
        {"queue_weight": -1},
        {"queue_wait_s": float("nan")},
        {"reload_s_per_token": -1e-6},
        {"reload_s_per_token": 2.0},
        {"max_ttl_s": 1e9},
        {"cover_quantile": 1.0},
        {"churn_tokens_per_s": 0},
        {"prefill_s_per_token": 0},
        {"slack_s": -1},
        {"max_ttl_s": 0},
        {"min_return_probability": 2},
        {"kv_capacity_tokens": 0},
        {"ttl": 3},
        {"min_context_tokens": -1},
        {"reuse_fraction": float("inf")},
    ],
)
def test_bad_config(values: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        RetentionConfig.from_mapping(values)
