"""A small trace replayed against the emulator: what arrives at the server is what the trace
says (calls, tags, threads, DAG order, prompt and output sizes, tool waits, arrivals)."""

from __future__ import annotations

import math

import pytest

from agentrt_sim.metrics import RunRecord, summarize
from agentrt_sim.replay.records import ReplayResult
from agentrt_sim.replay.runner import HEADER_REPLAY_NODE, ReplayConfig, ServerFacts, replay
from agentrt_sim.replay.server import ReplayError
from agentrt_sim.replay.summary import summarize_replay
from agentrt_sim.workloads.program import LLMNode, WaitNode

from .helpers import RecordedEmulator, Seen, prompt_tokens, recording_emulator, small_trace

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SCALE = 10.0

#: Prompt tokens each call's prompt stands for in the trace (program.py's prefix model):
#: system + root, then each earlier call's prompt + output, tool results and fresh tokens.
TRACE_PROMPTS = {
    ("chain-1", "c0"): 300 + 40,
    ("chain-1", "c2"): 340 + 20 + 60,
    ("chain-1", "c4"): 420 + 15 + 30 + 12,
    ("fan-1", "m0"): 200 + 30 + 100,
    ("fan-1", "m1"): 200 + 30 + 120,
    ("fan-1", "r"): 200 + 30 + 50,
    ("chain-2", "c0"): 300 + 35,
    ("chain-2", "c2"): 335 + 10 + 25 + 12,
}


async def _replay(emulator: RecordedEmulator) -> tuple[ReplayResult, ServerFacts]:
    config = ReplayConfig(emulator.openai_base_url, time_scale=SCALE)
    return await replay(small_trace(), config)


def _by_node(emulator: RecordedEmulator) -> dict[tuple[str, str], Seen]:
    calls: dict[tuple[str, str], Seen] = {}
    for seen in emulator.recorder.tagged():
        key = (seen.header("X-Agentrt-Program-Id") or "", seen.header(HEADER_REPLAY_NODE) or "")
        assert key not in calls, f"{key} sent twice"
        calls[key] = seen
    return calls


async def test_calls_tags_threads_and_sizes_arrive_as_the_trace_says() -> None:
    async with recording_emulator(SCALE) as emulator:
        result, facts = await _replay(emulator)
        calls = _by_node(emulator)
    assert facts.costs.measured and facts.ignore_eos
    assert all(p.error is None for p in result.programs), [p.error for p in result.programs]
    assert set(calls) == set(TRACE_PROMPTS)
    programs = {p.program.program_id: p for p in result.programs}
    for (program_id, node_id), seen in calls.items():
        node = next(n for n in programs[program_id].program.nodes if n.node_id == node_id)
        assert isinstance(node, LLMNode)
        thread = seen.header("X-Agentrt-Thread-Id") or ""
        assert thread == programs[program_id].threads[node.thread_id]
        assert (seen.header("X-Agentrt-Node-Id") or "").startswith(thread + ":")
        assert seen.body["max_tokens"] == node.output_tokens
        assert seen.body["ignore_eos"] is True
        assert seen.body["stream"] is True
        # Calibrated with /tokenize: exact, for segments long enough to hold the template.
        assert prompt_tokens(emulator.state, seen) == TRACE_PROMPTS[(program_id, node_id)]
        record = programs[program_id].calls[node_id]
        assert record.prompt_tokens == TRACE_PROMPTS[(program_id, node_id)]
        assert record.output_tokens == node.output_tokens
    # Threads: the map calls run in two distinct forked threads, the reduce in main.
    map0, map1, reduce_ = (
        calls["fan-1", n].header("X-Agentrt-Thread-Id") for n in ("m0", "m1", "r")
    )
    assert len({map0, map1, reduce_}) == 3 and reduce_ == "main"
    assert {calls["chain-1", n].header("X-Agentrt-Thread-Id") for n in ("c0", "c2")} == {"main"}


async def test_dag_order_tool_waits_and_arrivals_follow_the_trace() -> None:
    async with recording_emulator(SCALE) as emulator:
        result, _ = await _replay(emulator)
        calls = _by_node(emulator)
    slack = 0.005  # timer granularity (wall seconds)
    for program in result.programs:
        nodes = {n.node_id: n for n in program.program.nodes}
        for node in program.program.nodes:
            if not isinstance(node, LLMNode):
                continue
            seen = calls[program.program.program_id, node.node_id]
            for parent_id in node.parents:
                parent = nodes[parent_id]
                if isinstance(parent, LLMNode):  # a child call starts after its parents
                    assert seen.start_s >= calls[program.program.program_id, parent_id].end_s
                else:  # after the wait, which lasts duration / scale after its own parent
                    assert isinstance(parent, WaitNode)
                    before = calls[program.program.program_id, parent.parents[0]]
                    gap = seen.start_s - before.end_s
                    assert parent.duration_s / SCALE - slack <= gap <= parent.duration_s / SCALE + 1
    # Arrivals: the programs start as the trace's arrivals ÷ the scale (on the client's clock:
    # when a loaded machine lets the server see each first call is not the replay's to
    # decide), and their first calls reach the server after that. Each start is checked
    # against its own time on the replay's schedule (below: never early); the spacing only
    # from above, since a first program woken late on a loaded machine shortens it while the
    # second still starts on time.
    start = {p.program.program_id: p.start_s for p in result.programs}
    spacing = start["fan-1"] - start["chain-1"]
    assert spacing <= 1.0 / SCALE + 1
    assert calls["fan-1", "m0"].start_s - calls["chain-1", "c0"].start_s <= 1.0 / SCALE + 1
    for program in result.programs:
        assert program.start_s >= program.program.arrival_s / SCALE - slack


async def test_shared_system_prompt_and_context_prefixes_reach_the_server() -> None:
    async with recording_emulator(SCALE) as emulator:
        await _replay(emulator)
        calls = _by_node(emulator)
    system = {key: seen.body["messages"][0] for key, seen in calls.items()}
    assert system["chain-1", "c0"] == system["chain-2", "c0"] == system["chain-1", "c4"]
    assert system["chain-1", "c0"]["role"] == "system"
    assert system["fan-1", "m0"] != system["chain-1", "c0"]
    roots = {pid: calls[pid, "c0"].body["messages"][1] for pid in ("chain-1", "chain-2")}
    assert roots["chain-1"] != roots["chain-2"]
    # c2 extends c0's prompt with c0's answer (then the tool result).
    c0 = calls["chain-1", "c0"].body["messages"]
    c2 = calls["chain-1", "c2"].body["messages"]
    assert c2[: len(c0)] == c0 and c2[len(c0)]["role"] == "assistant"


async def test_summary_has_the_bench_sim_keys_in_model_seconds() -> None:
    async with recording_emulator(SCALE) as emulator:
        result, _ = await _replay(emulator)
        calls = _by_node(emulator)
    summary = summarize_replay(result, scale=SCALE, warmup_s=0.0, window_end_s=2.0)
    sim_keys = set(summarize(RunRecord(), warmup_s=0.0, window_end_s=1.0))
    assert sim_keys <= set(summary)
    assert summary["programs_completed"] == 3 and summary["calls_completed"] == 8
    assert summary["prompt_tokens"] == sum(TRACE_PROMPTS.values())
    assert summary["prompt_tokens"] == summary["prompt_tokens_trace"]

    # chain-1's two searches (2 + 1 model seconds) and chain-2's human turn (1) lie on the
    # critical paths; means over 3 programs. A wait lasts at least its trace duration ÷ the
    # scale, and at most the server's gap between the calls either side of it: whatever a
    # stalled machine adds (a late wake-up, a late send) lies in between, in any amount.
    def gap(program_id: str, before: str, after: str) -> float:  # model seconds
        return SCALE * (calls[program_id, after].start_s - calls[program_id, before].end_s)

    slack = 0.005 * SCALE  # timer granularity, per wait (model seconds)
    tool_gaps = gap("chain-1", "c0", "c2") + gap("chain-1", "c2", "c4")
    assert (3.0 - 2 * slack) / 3 <= summary["tool_s_mean"] <= tool_gaps / 3
    think_gap = gap("chain-2", "c0", "c2")
    assert (1.0 - slack) / 3 <= summary["think_s_mean"] <= think_gap / 3
    assert 0 < summary["prefix_hit_rate"] < 1
    assert summary["engine_steps"] is None and summary["controller_wait_s_mean"] is None
    e2e = summary["e2e_latency_s"]["mean"]
    assert e2e >= (3.0 + 1.0) / 3 and math.isfinite(e2e)


async def test_a_replay_on_another_time_scale_than_its_engine_is_refused() -> None:
    async with recording_emulator(SCALE) as emulator:
        config = ReplayConfig(emulator.openai_base_url, time_scale=2.0)
        with pytest.raises(ReplayError, match=r"runs at time scale 10 and this replay at 2: "
                           r"give --time-scale 10"):  # fmt: skip
            await replay(small_trace(), config)
        assert emulator.recorder.tagged() == []  # refused before any program started
