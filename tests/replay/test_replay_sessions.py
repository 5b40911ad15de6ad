"""``agentrt bench replay`` of recorded sessions (the ``agentrt-sessions`` JSONL,
docs/simulator.md "Recorded sessions") against the emulator, and a trace whose calls do not
fit the server refused before any program starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt.cli import main
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import EmulatorConfig, serve_engine_in_thread

pytestmark = pytest.mark.timeout(60)

#: Two coding sessions: the same 640-token system prompt (their first calls' cached tokens),
#: a history growing by the answers and the tools' results, and a tool wait between turns.
SESSIONS = [
    {"format": "agentrt-sessions", "version": 1},
    {"session": "s1", "turn": 0, "prompt_tokens": 900, "cached_tokens": 640, "output_tokens": 24,
     "tool": "shell", "tool_duration_s": 0.4, "start_s": 0.0},
    {"session": "s2", "turn": 0, "prompt_tokens": 800, "cached_tokens": 640, "output_tokens": 16,
     "tool": "test", "tool_duration_s": 1.5, "start_s": 0.5},
    {"session": "s1", "turn": 1, "prompt_tokens": 1300, "cached_tokens": 900, "output_tokens": 32,
     "tool": "edit", "tool_duration_s": 0.2},
    {"session": "s2", "turn": 1, "prompt_tokens": 1100, "cached_tokens": 800, "output_tokens": 8},
    {"session": "s1", "turn": 2, "prompt_tokens": 1700, "cached_tokens": 1300, "output_tokens": 16},
]  # fmt: skip


def _write(path: Path) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in SESSIONS))
    return path


def test_recorded_sessions_replay_with_their_prefixes_cached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _write(tmp_path / "sessions.jsonl")
    with serve_engine_in_thread(EmulatorConfig(time_scale=20)) as engine:
        argv = ["bench", "replay", "--trace", str(trace), "--base-url", engine.openai_base_url]
        code = main([*argv, "--time-scale", "20", "--warmup", "0", "--json"])
    assert code == 0
    [summary] = json.loads(capsys.readouterr().out)
    assert summary["programs_completed"] == 2 and summary["programs_failed"] == 0
    # Every call's prompt as recorded, to the token.
    recorded = 900 + 800 + 1300 + 1100 + 1700
    assert summary["prompt_tokens"] == summary["prompt_tokens_trace"] == recorded
    # s2's first call reuses s1's system prompt; every later call its session's history (the
    # recorded prompt of the turn before and its answer), in whole 16-token blocks.
    assert summary["cached_prompt_tokens"] >= 624 + 912 + 800 + 1312
    # The recorded tool waits, waited (model seconds along each program's critical path). Wall
    # time scaled 20×: a pause of the test process (a full GC late in a long suite, the
    # machine's other work) adds 20 ms of model time per real ms, so only the floor is exact;
    # the ceiling catches waits made twice or in unscaled seconds.
    recorded_tool_s_mean = (0.4 + 0.2 + 1.5) / 2
    assert recorded_tool_s_mean - 0.01 <= summary["tool_s_mean"] < 2 * recorded_tool_s_mean


def test_a_call_longer_than_the_servers_max_model_len_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _write(tmp_path / "sessions.jsonl")
    config = EmulatorConfig(engine=EngineConfig(max_model_len=1500), time_scale=20)
    with serve_engine_in_thread(config) as engine:
        argv = ["bench", "replay", "--trace", str(trace), "--base-url", engine.openai_base_url]
        code = main([*argv, "--time-scale", "20", "--json"])
        served = engine.state.core.stats().prompt_tokens
    assert code == 2
    assert served < 100  # the probe's one-token calls only: no program started
    err = capsys.readouterr().err
    assert "program 's1', call 'c2': 1700 prompt + 16 output tokens" in err
    assert "max_model_len 1500" in err and "--max-model-len 1716" in err
