"""Fused pure-decode steps must equal the same number of single steps, exactly.

Property test (hypothesis): two engines get the same random workload (shared prefixes, block
pressure, preemptions, priorities, salts, pins, aborts). Engine F steps with random
``max_steps`` / ``horizon_s``; engine S replays each of F's results with single steps. Every
result, counter and the whole KV state (free-queue order, prefix cache, block tables) must
match at every boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrt_emulator.core import EngineCore, EngineRequest, StepResult

from .helpers import engine, request, run

SEGMENTS = [list(range(s, s + n)) for s, n in [(0, 7), (10, 16), (40, 5), (60, 23), (90, 3)]]


@dataclass
class Event:
    boundary: int
    kind: str  # "add", "pin", "unpin", "abort"
    request: EngineRequest | None = None
    pin_tokens: tuple[int, ...] = ()
    ttl_s: float = 0.0
    target: str = ""


@st.composite
def workloads(draw: st.DrawFn) -> tuple[dict[str, object], str, list[Event], list[int], float]:
    config = {
        "block_size": draw(st.sampled_from([1, 2, 4, 16])),
        "num_gpu_blocks": draw(st.integers(8, 60)),
        "max_num_seqs": draw(st.integers(1, 6)),
        "max_num_batched_tokens": draw(st.sampled_from([3, 8, 32, 512])),
        "scheduling_policy": draw(st.sampled_from(["fcfs", "priority"])),
        "enable_prefix_caching": draw(st.booleans()),
        "max_model_len": 4096,
    }
    profile = draw(st.sampled_from(["unit-step", "cpu-tiny"]))
    kv_tokens = config["num_gpu_blocks"] * config["block_size"]  # type: ignore[operator]
    events: list[Event] = []
    for i in range(draw(st.integers(1, 10))):
        parts = draw(st.lists(st.sampled_from(range(len(SEGMENTS))), min_size=1, max_size=3))
        prompt = [t for p in parts for t in SEGMENTS[p]]
        output = draw(st.integers(1, 40))
        if len(prompt) + output - 1 > kv_tokens:
            output = 1
            prompt = prompt[: max(1, kv_tokens - 1)]
        req = request(
            f"r{i}",
            prompt,
            output,
            arrival_s=float(i),
            priority=draw(st.integers(0, 3)),
            cache_salt=draw(st.sampled_from([None, None, "tenant"])),
            first_token=draw(st.sampled_from([0, 10, 500])),
        )
        events.append(Event(draw(st.integers(0, 12)), "add", request=req))
    for j in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["pin", "unpin", "abort"]))
        boundary = draw(st.integers(0, 15))
        if kind == "pin":
            parts = draw(st.lists(st.sampled_from(range(len(SEGMENTS))), min_size=1, max_size=2))
            tokens = tuple(t for p in parts for t in SEGMENTS[p])
            # half-integer TTLs never coincide with unit-step boundaries
            ttl = draw(st.sampled_from([0.5, 3.5, 20.5, math.inf]))
            events.append(Event(boundary, "pin", pin_tokens=tokens, ttl_s=ttl, target=f"p{j % 2}"))
        elif kind == "unpin":
            events.append(Event(boundary, "unpin", target=f"p{j % 2}"))
        else:
            events.append(Event(boundary, "abort", target=f"r{draw(st.integers(0, 9))}"))
    max_steps = draw(st.lists(st.sampled_from([1, 2, 3, 8, 64, 10_000]), min_size=1, max_size=5))
    horizon = draw(st.sampled_from([math.inf, math.inf, 2.5, 0.05]))
    return config, profile, events, max_steps, horizon


def _apply(core: EngineCore, event: Event, now_s: float) -> None:
    if event.kind == "add":
        assert event.request is not None
        core.add_request(event.request)
    elif event.kind == "pin":
        core.pin(event.target, event.pin_tokens, cache_salt=None, ttl_s=event.ttl_s, now_s=now_s)
    elif event.kind == "unpin":
        core.unpin(event.target)
    else:
        core.abort_request(event.target)


def _kv_state(core: EngineCore) -> object:
    pool = core._pool
    requests = {
        rid: (r.num_computed, r.num_output, tuple(r.blocks), r.num_cached_blocks, r.high_water)
        for rid, r in core._sched.requests.items()
    }
    return (
        list(pool.free),
        dict(pool.cached),
        list(pool.ref),
        list(pool.pin),
        requests,
        [r.request_id for r in core._sched.running],
        [r.request_id for r in core._sched.waiting],
    )


def _merge(
    results: list[StepResult],
) -> tuple[list[tuple[str, int, bool, bool, int, int]], list[str]]:
    """Fold single-step results into the shape of one fused result."""
    merged: dict[str, list[object]] = {}
    preempted: list[str] = []
    for result in results:
        preempted.extend(result.preempted)
        for p in result.progress:
            entry = merged.setdefault(p.request_id, [p.request_id, 0, False, False, 0, 0])
            entry[1] += p.new_tokens  # type: ignore[operator]
            entry[2] = entry[2] or p.first_token
            entry[3] = p.finished
            entry[4] = p.num_cached_tokens
            entry[5] += p.num_computed_tokens  # type: ignore[operator]
    return [tuple(e) for e in merged.values()], preempted  # type: ignore[misc]


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_fused_steps_equal_single_steps(
    case: tuple[dict[str, object], str, list[Event], list[int], float],
) -> None:
    config, profile, events, max_steps_cycle, horizon = case
    fused = engine(profile, **config)
    single = engine(profile, **config)
    now_f = now_s = 0.0
    for boundary in range(5000):
        for event in events:
            if event.boundary == boundary:
                _apply(fused, event, now_f)
                _apply(single, event, now_s)
        max_steps = max_steps_cycle[boundary % len(max_steps_cycle)]
        result = fused.step(now_f, max_steps=max_steps, horizon_s=horizon)
        if result is None:
            assert single.step(now_s) is None
            if boundary > max(e.boundary for e in events):
                if not fused.has_unfinished():
                    break
                if fused.next_pin_expiry_s == math.inf:
                    # blocked for good by pins without expiry: the retention policy ends them
                    for core in (fused, single):
                        core.unpin("p0")
                        core.unpin("p1")
            # idle or blocked by pins: jump to the next event or pin expiry
            now_f = now_s = max(now_f, min(fused.next_pin_expiry_s, now_f + 1.0))
        else:
            assert 1 <= result.num_steps <= max_steps or result.num_steps == 0
            if result.num_steps > 1:
                assert result.duration_s <= horizon
            singles = []
            for _ in range(max(1, result.num_steps)):
                one = single.step(now_s)
                assert one is not None
                singles.append(one)
                now_s += one.duration_s
            now_f += result.duration_s
            assert sum(s.num_steps for s in singles) == result.num_steps
            progress, preempted = _merge(singles)
            assert [
                (
                    p.request_id,
                    p.new_tokens,
                    p.first_token,
                    p.finished,
                    p.num_cached_tokens,
                    p.num_computed_tokens,
                )
                for p in result.progress
            ] == progress
            assert result.preempted == preempted
            assert result.duration_s == pytest.approx(sum(s.duration_s for s in singles), rel=1e-12)
            assert now_f == pytest.approx(now_s, rel=1e-12)
        assert fused.stats() == single.stats()
        assert _kv_state(fused) == _kv_state(single)
    else:
        raise AssertionError("workload did not finish")
    assert not single.has_unfinished()


def test_long_decode_batch_fuses_and_matches() -> None:
    cores = [engine("a100-llama3-8b", block_size=16) for _ in range(2)]
    for core in cores:
        for i in range(8):
            core.add_request(request(f"r{i}", 100 + 10 * i, 50 + 7 * i, first_token=1000 * i))
    fused = run(cores[0], max_steps=1000)
    single = run(cores[1])
    assert len(fused.steps) < len(single.steps) / 5
    assert fused.tokens == single.tokens
    assert fused.first_token_step == single.first_token_step
    assert fused.finish_step == single.finish_step
    assert fused.now_s == pytest.approx(single.now_s, rel=1e-12)
    for rid in fused.finish_s:
        assert fused.finish_s[rid] == pytest.approx(single.finish_s[rid], rel=1e-12)
    assert cores[0].stats() == cores[1].stats()


def test_horizon_limits_fused_duration() -> None:
    core = engine("unit-step")
    core.add_request(request("r", 1, 100))
    assert core.step(0.0) is not None  # prefill + first token
    result = core.step(1.0, max_steps=1000, horizon_s=10.0)
    assert result is not None and result.num_steps == 10 and result.duration_s == 10.0
    # the first step always runs, even when longer than the horizon
    result = core.step(11.0, max_steps=1000, horizon_s=0.5)
    assert result is not None and result.num_steps == 1


def test_no_fusion_while_a_waiting_request_could_be_admitted() -> None:
    core = engine("unit-step", max_num_seqs=4)
    core.add_request(request("a", 1, 50))
    core.step(0.0)
    core.add_request(request("b", 1, 50, first_token=9))
    result = core.step(1.0, max_steps=100)
    assert result is not None and result.num_steps == 1
    assert {p.request_id for p in result.progress} == {"a", "b"}


def test_fusion_stops_before_a_pin_expires() -> None:
    core = engine("unit-step")
    core.add_request(request("warm", 40, 1))
    run(core)
    core.pin("p", range(40), cache_salt=None, ttl_s=5.5, now_s=1.0)  # expires at 6.5
    core.add_request(request("r", list(range(100, 110)), 100))
    assert core.step(1.0) is not None
    result = core.step(2.0, max_steps=1000)
    # steps start at 2, 3, 4, 5, 6; the step starting at 7 must see the pin expired
    assert result is not None and result.num_steps == 5
    assert core.stats().pinned_blocks == 2
    core.step(7.0)
    assert core.stats().pinned_blocks == 0
