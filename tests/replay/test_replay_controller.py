"""The replay through a real controller in front of the emulator: the controller's process
table sees each tool wait (name, kind, predicted duration) while it lasts."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocol import EVENTS_PREFIX
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_sim.replay.runner import ReplayConfig, replay
from agentrt_sim.replay.summary import summarize_replay

from .helpers import recording_emulator, small_trace

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SCALE = 10.0


async def test_tool_waits_reach_the_controller_with_name_and_prediction() -> None:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    async with recording_emulator(SCALE) as emulator:
        # The controller runs on the emulator's model seconds, as the replay's waits do.
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(emulator.base_url),),
            scrape_interval_s=0.2,
            time_scale=SCALE,
        )
        async with serve_controller(config) as url, httpx.AsyncClient() as http:
            replay_config = ReplayConfig(
                url + "/v1",
                time_scale=SCALE,
                tokenize_url=emulator.base_url,  # the controller has no /tokenize
                metrics_url=emulator.base_url,
                controller="required",
            )
            done = anyio.Event()

            async def watch() -> None:
                while not done.is_set():
                    table = (await http.get(url + EVENTS_PREFIX + "/programs")).json()
                    for program in table["entries"]:
                        for wait in program["tool_waits"]:
                            seen[program["program_id"], wait["node_id"]] = wait
                    await anyio.sleep(0.01)

            async with anyio.create_task_group() as group:
                group.start_soon(watch)
                result, facts = await replay(small_trace(), replay_config)
                done.set()
    assert facts.costs.measured
    assert all(p.error is None for p in result.programs), [p.error for p in result.programs]
    # chain-1's two searches and chain-2's think time, each in the program's main thread.
    by_program = {(pid, w["tool_name"], w["kind"]) for (pid, _), w in seen.items()}
    assert by_program == {
        ("chain-1", "search", "tool"),
        ("chain-2", "human", "human"),
    }
    searches = sorted(
        (w for (pid, _), w in seen.items() if w["tool_name"] == "search"),
        key=lambda w: w["node_id"],
    )
    assert len(searches) == 2 and all(w["thread_id"] == "main" for w in searches)
    # The first search has no history; the second is predicted from the first: the replay
    # sends 0.2 wall seconds, as any client would, and the controller at the time scale holds
    # 2 of its model seconds.
    first, second = searches
    assert first["predicted_duration_s"] is None
    assert second["predicted_duration_s"] == pytest.approx(2.0, abs=0.5)
    # Every call went through the controller, which reports its queueing.
    summary = summarize_replay(result, scale=SCALE, warmup_s=0.0, window_end_s=2.0)
    assert summary["programs_completed"] == 3
    assert summary["controller_wait_s_mean"] is not None
    assert summary["prompt_tokens"] == summary["prompt_tokens_trace"]
    # The controller forwarded the 8 calls (without our tags) plus the 1-token probe.
    forwarded = [s for s in emulator.recorder.seen if s.body["max_tokens"] > 1]
    assert len(forwarded) == 8
