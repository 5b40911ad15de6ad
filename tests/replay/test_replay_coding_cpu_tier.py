"""A small coding trace replayed through a real controller to an emulator with the KV CPU tier
on (issue #25, "Must show"): the repository context shared across programs and the growing
history reach the engine as token-identical prefixes, evicted prefixes come back from the CPU
tier instead of being recomputed, and the controller's process table and the engine's pins
are empty once the run is over.

The trace is the ``coding`` workload with its contexts scaled down (about 1.5 K tokens at the
end instead of 84.5 K) onto an engine of 160 KV blocks (2,560 tokens): four programs of one
repository overlap, so the contexts of programs in a tool wait are pushed out of GPU memory by
the others' calls, and the calls after the wait find them in the CPU tier.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocol import EVENTS_PREFIX
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import EmulatorConfig, serve_engine
from agentrt_sim.replay.records import CallRecord, ProgramResult
from agentrt_sim.replay.runner import ReplayConfig, replay
from agentrt_sim.replay.server import scrape_counters
from agentrt_sim.workloads.coding import CodingParams, CodingWorkload
from agentrt_sim.workloads.program import LLMNode, Program
from agentrt_sim.workloads.trace import load_trace, save_trace

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(90)]

SCALE = 20.0
BLOCK = 16
GPU_BLOCKS = 160
ADMIN = "admin-token-coding"
#: The workload's shape at 1/50 of its token sizes, with tool waits of a few model seconds.
SMALL = CodingParams(
    calls_mean=4.0,
    calls_min=3,
    calls_max=5,
    repos=1,
    system_tokens=160,
    repo_tokens=480,
    issue_tokens_mean=60.0,
    final_context_tokens_mean=1500.0,
    output_tokens_mean=16.0,
    output_tokens_max=48,
    result_tokens_max=400,
    tool_p50_s=0.6,
    tool_p90_s=2.0,
    tool_min_s=0.3,
    tool_max_s=3.0,
)
KV_COUNTERS = (
    "vllm:external_prefix_cache_hits_total",
    "agentrt_engine_kv_offloaded_tokens_total",
    "agentrt_engine_kv_cpu_blocks",
)


def coding_trace(path: Path) -> list[Program]:
    """Four programs of one repository, 0.4 model s apart, through a trace file."""
    workload = CodingWorkload(SMALL)
    rng = random.Random(3)
    programs = [workload.draw(rng, f"coding-{i}", 0.4 * i) for i in range(4)]
    save_trace(programs, path)
    return load_trace(path)


def _in_order(program: ProgramResult) -> list[CallRecord]:
    nodes = program.program.nodes
    return [program.calls[node.node_id] for node in nodes if isinstance(node, LLMNode)]


async def _metrics(http: httpx.AsyncClient, root: str) -> dict[str, float]:
    text = (await http.get(root + "/metrics")).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name in KV_COUNTERS:
            values[name] = float(rest.rsplit(" ", 1)[1])
    return values


async def test_coding_trace_reloads_from_the_cpu_tier_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    programs = coding_trace(tmp_path / "coding.jsonl")
    engine_config = EmulatorConfig(
        engine=EngineConfig(
            num_gpu_blocks=GPU_BLOCKS, block_size=BLOCK, kv_offloading_size=1.0, num_cpu_blocks=1024
        ),
        time_scale=SCALE,
    )
    admin = {"authorization": f"Bearer {ADMIN}"}
    async with serve_engine(engine_config) as engine, httpx.AsyncClient(timeout=10) as http:
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(engine.base_url),),
            scrape_interval_s=0.2,
            admin_token=ADMIN,
        )
        async with serve_controller(config) as url:
            replay_config = ReplayConfig(
                url + "/v1",
                time_scale=SCALE,
                tokenize_url=engine.base_url,
                metrics_url=engine.base_url,
                controller="required",
            )
            result, facts = await replay(programs, replay_config)
            # The SDK ended every program; the retention loop releases their pins.
            table: dict[str, Any] = {}
            pins: dict[str, Any] = {}
            with anyio.fail_after(10):
                while True:
                    table = (
                        await http.get(url + EVENTS_PREFIX + "/programs", headers=admin)
                    ).json()
                    pins = (await http.get(engine.base_url + "/agentrt/engine/v1/pins")).json()
                    if not table["entries"] and not pins["pins"]:
                        break
                    await anyio.sleep(0.05)
            queues = (await http.get(url + EVENTS_PREFIX + "/queues", headers=admin)).json()
        metrics = await _metrics(http, engine.base_url)
        counters = await scrape_counters(http, engine.base_url)
        stats = engine.state.core.stats()

    assert facts.costs.measured and facts.ignore_eos
    # The controller lists no max_model_len: the engine's /tokenize told it.
    assert facts.max_model_len == EngineConfig().max_model_len
    assert all(p.error is None for p in result.programs), [p.error for p in result.programs]
    # The server counted the trace's tokens to the token.
    calls = [call for program in result.programs for call in _in_order(program)]
    assert [c.prompt_tokens for c in calls] == [c.trace_prompt_tokens for c in calls]
    # Shared prefixes are token-identical: every program's first call finds at least the
    # system prompt and the repository context cached (but the first program's, at a cold
    # engine), and each later call at least its previous call's whole prompt and answer,
    # in full blocks (from GPU memory or reloaded from the CPU tier).
    shared = (SMALL.system_tokens + SMALL.repo_tokens) // BLOCK * BLOCK - BLOCK
    for program in result.programs[1:]:
        first = program.calls["c0"]
        assert first.cached_tokens is not None and first.cached_tokens >= shared
    for program in result.programs:
        for before, after in itertools.pairwise(_in_order(program)):
            grown = (before.prompt_tokens or 0) + (before.output_tokens or 0)
            assert (after.cached_tokens or 0) >= grown // BLOCK * BLOCK - BLOCK
    # Evicted prefixes were reloaded over PCIe, none was recomputed.
    assert metrics["agentrt_engine_kv_cpu_blocks"] == 1024
    assert metrics["agentrt_engine_kv_offloaded_tokens_total"] > 0
    assert metrics["vllm:external_prefix_cache_hits_total"] > 0
    assert stats.reloaded_tokens == metrics["vllm:external_prefix_cache_hits_total"]
    assert stats.evicted_prefix_tokens == 0
    assert counters["vllm:prefix_cache_hits_total"] > 0
    # Nothing is left: no program, no pin, no retained context, nothing queued.
    assert table["entries"] == [] and table["programs"] == 0
    assert pins["pins"] == [] and pins["pinned_blocks"] == 0
    assert stats.pinned_blocks == 0
    assert queues["queued"] == 0
    assert queues["retention"]["retained"] == 0
