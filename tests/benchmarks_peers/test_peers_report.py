"""``benchmarks/peers.py``'s parsing and reporting on recorded points (the run itself starts
the peers and takes minutes: not in CI)."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.benchmark_modules import ROOT, load_benchmark
from tests.benchmarks_peers.helpers import until_answering

pytestmark = pytest.mark.timeout(30)

peers = load_benchmark("peers")
report = peers.report
load = peers.load


def _point(proxy: str, rep: int, **values: float) -> dict[str, Any]:
    return {"proxy": proxy, "rep": rep, **values}


POINTS = [
    _point("agentrt", 0, cpu_s_per_1k_calls=0.9, calls_per_s=1000.0),
    _point("vllm-router", 0, cpu_s_per_1k_calls=0.3, calls_per_s=4000.0),
    _point("litellm", 0, cpu_s_per_1k_calls=18.0, calls_per_s=50.0),
    _point("agentrt", 1, cpu_s_per_1k_calls=1.2, calls_per_s=800.0),
    _point("vllm-router", 1, cpu_s_per_1k_calls=0.2, calls_per_s=4000.0),
    _point("litellm", 1, cpu_s_per_1k_calls=20.0, calls_per_s=40.0),
    _point("vllm-router", 2, cpu_s_per_1k_calls=0.1, calls_per_s=1.0),  # ours missing: unpaired
]


def test_ratios_pair_repetitions_and_give_median_and_range() -> None:
    ratio = report.ratios(POINTS, "vllm-router", "cpu_s_per_1k_calls")
    assert ratio.median == pytest.approx((3.0 + 6.0) / 2)
    assert (ratio.low, ratio.high) == (pytest.approx(3.0), pytest.approx(6.0))
    assert ratio.text(2, "×") == "4.50× [3.00–6.00]"
    assert math.isnan(report.ratios(POINTS, "sglang-router", "cpu_s_per_1k_calls").median)
    assert report.spread([]).text(2) == "–"


def test_verdicts_say_plainly_where_a_peer_is_ahead() -> None:
    measures = [m for m in report.OVERHEAD if m.key in ("cpu_s_per_1k_calls", "calls_per_s")]
    lines = report.verdicts(POINTS, measures)
    vllm, litellm = lines
    assert vllm == (
        "- **`vllm-router` is ahead of ours** in calls/s (4.44× better); "
        "proxy CPU s per 1,000 calls (4.50× better)."
    )
    assert litellm.startswith("- `litellm` is behind ours in calls/s (")


def test_the_section_has_command_versions_ratios_and_skips() -> None:
    result = {
        "command": "python benchmarks/peers.py --quick",
        "versions": {"agentrt": "0.9.0", "vllm-router": "0.1.17", "litellm": "1.108.7"},
        "skipped": {"sglang-router": "pip install sglang-router==0.3.2 failed"},
        "machine": "x86_64, 2 cores",
        "load_average": [9.5, 11.0],
        "reps": 2, "calls": 300, "concurrency": 16, "seconds": 2.0, "chunks": 64,
        "engines": 2, "time_scale": 10.0, "trace": "mixed",
        "overhead": POINTS,
        "program": [_point("agentrt", 0, e2e_mean_s=30.0), _point("litellm", 0, e2e_mean_s=33.0)],
    }  # fmt: skip
    section = report.markdown({**result, "notes": ["LiteLLM needs a master key."]})
    assert section.startswith("## Peers\n")
    assert "Observed in this run:\n\n- LiteLLM needs a master key.\n" in section
    assert "`python benchmarks/peers.py --quick`" in section
    assert "`vllm-router` 0.1.17" in section and "`litellm` 1.108.7" in section
    assert "Skipped `sglang-router`: pip install sglang-router==0.3.2 failed." in section
    assert "| proxy CPU s per 1,000 calls | 4.50× [3.00–6.00] | 0.06× [0.05–0.06] |" in section
    assert "| program E2E mean (s) | 0.91× |" in section
    assert "9.5 before, 11.0 after" in section
    assert "**Programs, `mixed` trace**" in section and "`coding` trace" not in section


def test_the_coding_trace_gets_tables_and_verdicts_of_its_own() -> None:
    result = {
        "command": "python benchmarks/peers.py --coding",
        "versions": {"agentrt": "0.9.0", "vllm-router": "0.1.17"},
        "machine": "x86_64, 2 cores",
        "load_average": [1.0, 1.5],
        "reps": 1, "calls": 300, "concurrency": 16, "seconds": 2.0, "chunks": 64,
        "engines": 2, "time_scale": 10.0, "trace": "mixed, coding",
        "overhead": [],
        "program": [
            _point("agentrt", 0, e2e_mean_s=30.0), _point("vllm-router", 0, e2e_mean_s=20.0)
        ],
        "program_coding": [
            _point("agentrt", 0, e2e_mean_s=40.0), _point("vllm-router", 0, e2e_mean_s=80.0)
        ],
    }  # fmt: skip
    section = report.markdown(result)
    mixed, coding = section.split("**Programs, `coding` trace**")
    assert "**Programs, `mixed` trace**" in mixed and "| program E2E mean (s) | 1.50× |" in mixed
    assert "| program E2E mean (s) | 0.50× |" in coding
    assert "program E2E mean (s) (1.50× better) (`mixed` trace)." in section
    assert "program E2E mean (s) (2.00× worse) (`coding` trace)." in section


def test_the_program_rows_say_the_engines_size_and_the_trace_rate() -> None:
    result = {
        "command": "python benchmarks/peers.py --coding-only --num-gpu-blocks 12288",
        "versions": {"agentrt": "0.9.0", "sglang-router": "0.3.2"},
        "machine": "x86_64, 2 cores",
        "load_average": [1.0, 1.5],
        "reps": 0, "engines": 2, "time_scale": 10.0, "trace": "mixed, coding",
        "max_num_seqs": 8, "coding_num_gpu_blocks": 12288, "coding_rate": 0.03,
        "coding_duration": 600.0,
        "overhead": [],
        "program_coding": [
            _point("agentrt", 0, e2e_mean_s=600.0, programs_completed=12),
            _point("sglang-router", 0, e2e_mean_s=700.0, programs_completed=10),
        ],
    }  # fmt: skip
    section = report.markdown(result)
    assert "2 fresh emulators per run of 8 batch slots and 12,288 KV blocks of 16 tokens each" in (
        section
    )
    assert "0.03 programs/s over 600 model seconds of arrivals" in section
    # Completed programs are higher-is-better: ours ÷ peer 1.2 and the peer is behind.
    assert "| programs completed | 1.20× |" in section
    assert "programs completed (1.20× worse) (`coding` trace)." in section
    profile = report.markdown({**result, "coding_num_gpu_blocks": None})
    assert "of 8 batch slots and the profile's KV blocks each" in profile
    older = {k: v for k, v in result.items() if k not in ("max_num_seqs", "coding_rate")}
    assert "fresh emulators per run, time scale 10.0; model seconds" in report.markdown(older)
    assert "--time-scale" not in section
    scaled = report.markdown({**result, "ours_time_scale": 10.0})
    assert "tool-wait events, at `--time-scale 10`: its policies on the emulators' model" in (
        scaled
    )
    # The emulators' stream interval, when the run set one (0 and older results: every step).
    assert "streams written" not in section
    assert "streams written" not in report.markdown({**result, "stream_interval_ms": 0.0})
    paced = report.markdown({**result, "stream_interval_ms": 20.0})
    assert "time scale 10.0, streams written at most every 20 wall ms; 0.03 programs/s" in paced


def test_a_program_run_whose_emulators_fell_behind_is_named() -> None:
    def run(proxy: str, rep: int, lag: float, dropped: float = 0.0) -> dict[str, Any]:
        return _point(proxy, rep, e2e_mean_s=600.0, engine_lag_mean_s=lag,
                      engine_dropped_model_s=dropped, engines_kept_up=not dropped)  # fmt: skip

    kept = [run("agentrt", 0, 0.002), run("sglang-router", 0, 0.004)]
    assert report.schedule_lines(kept) == [
        "",
        "The emulators kept their schedule in every run (worst mean lag 0.0040 s).",
    ]
    behind = [*kept, run("agentrt", 1, 0.05, 12.5)]
    (line,) = report.schedule_lines(behind)[1:]
    assert line.startswith("**The emulators fell behind their schedule** in 1 of 3 runs: ")
    assert "`agentrt` rep 1 (lag 0.050 s, 12.5 model s given up)" in line
    assert line.endswith("a lower `--time-scale` gives the emulators the time they lacked.")
    # Results from before the emulators' health was recorded say nothing of it.
    assert report.schedule_lines([_point("agentrt", 0, e2e_mean_s=1.0)]) == []


def test_each_trace_has_its_own_window_and_kv_unless_the_command_sets_them() -> None:
    def runs(*argv: str) -> list[Any]:
        parser = argparse.ArgumentParser()
        parser.add_argument("--rate", type=float, default=0.6)
        parser.add_argument("--coding-rate", type=float, default=0.03)
        parser.add_argument("--duration", type=float)
        parser.add_argument("--num-gpu-blocks", type=int)
        parser.add_argument("--coding", action="store_true")
        parser.add_argument("--coding-only", action="store_true")
        return peers.trace_runs(parser.parse_args(argv))

    TraceRun = peers.TraceRun
    assert runs() == [TraceRun("mixed", 0.6, 90.0, None)]
    # The coding trace runs short of memory by default: with the profile's KV nothing contends.
    assert runs("--coding") == [
        TraceRun("mixed", 0.6, 90.0, None),
        TraceRun("coding", 0.03, 600.0, 12_288),
    ]
    assert runs("--coding-only", "--duration", "300", "--num-gpu-blocks", "0") == [
        TraceRun("coding", 0.03, 300.0, None)
    ]
    assert runs("--num-gpu-blocks", "4096") == [TraceRun("mixed", 0.6, 90.0, 4096)]


def test_proxies_are_checked_and_ours_always_comes_first() -> None:
    known = peers.setup.PROXIES
    assert report.parse_proxies("litellm,vllm-router,litellm", known) == [
        "agentrt",
        "litellm",
        "vllm-router",
    ]
    with pytest.raises(ValueError, match="--proxies: unknown nginx; known: agentrt, "):
        report.parse_proxies("nginx", known)


def test_each_peer_starts_with_its_program_features_on(tmp_path: Any) -> None:
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    vllm = peers.setup.launch("vllm-router", 9, urls, "m", tmp_path, 10, "key")
    assert "--enable-program-scheduling" in vllm.argv and vllm.argv.count("--worker-urls") == 1
    sglang = peers.setup.launch("sglang-router", 9, urls, "m", tmp_path, 10, "key")
    assert sglang.argv[sglang.argv.index("--policy") + 1] == "cache_aware"
    litellm = peers.setup.launch("litellm", 9, urls, "m", tmp_path, 10, "key")
    assert litellm.env["LITELLM_MASTER_KEY"] == "key" and litellm.env["HF_HUB_OFFLINE"] == "1"
    (config,) = litellm.files.values()
    assert config.count("api_base: http://127.0.0.1:") == 2
    ours = peers.setup.launch("agentrt", 9, urls, "m", tmp_path, 10, "key")
    assert ours.argv.count("--backend") == 2 and "--time-scale" not in ours.argv
    # In front of emulators run faster than real time, our policies run on their model time.
    scaled = peers.setup.launch("agentrt", 9, urls, "m", tmp_path, 10, "key", (), 10.0)
    assert scaled.argv[scaled.argv.index("--time-scale") + 1] == "10"
    assert (
        "--time-scale"
        not in peers.setup.launch("sglang-router", 9, urls, "m", tmp_path, 10, "key", (), 10.0).argv
    )


@pytest.fixture
def backend() -> Iterator[int]:
    """The fixed-reply backend as the benchmark starts it (``peers.py --serve-backend``), in a
    process of its own, interrupted and waited for at the end; its port."""
    port = peers.free_port()
    argv = [sys.executable, "benchmarks/peers.py", "--serve-backend", str(port)]
    process = subprocess.Popen(argv, cwd=ROOT)
    try:
        yield port
    finally:
        process.send_signal(signal.SIGINT)  # what serve_backend stops on
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0, f"the backend did not stop cleanly: {process.returncode}"


def test_the_fixed_backend_and_the_client_over_loopback(backend: int) -> None:
    # The load generator against the fixed-reply backend: a plain and a streamed call, the
    # stream's chunks counted.
    port = backend

    async def main() -> tuple[list[float], int]:
        await until_answering(load, port)
        return await load.latencies(port, 3, warmup=1), await load.rate(port, 2, 0.2, stream=True)

    times, streamed = asyncio.run(main())
    assert len(times) == 3 and streamed > 0
    assert load._stream().count(b"data: ") == load.STREAM_CHUNKS + 2  # + usage + [DONE]


def test_idle_cpu_is_shown_absolute_and_never_as_a_ratio() -> None:
    points = [
        _point("agentrt", 0, cpu_s_per_1k_calls=0.4, idle_cpu_ms_per_s=0.0),
        _point("vllm-router", 0, cpu_s_per_1k_calls=0.2, idle_cpu_ms_per_s=12.5),
    ]
    result = {
        "command": "python benchmarks/peers.py", "versions": {"agentrt": "0.9.0"},
        "machine": "x86_64, 2 cores", "load_average": [1.0, 1.0], "reps": 1, "calls": 10,
        "concurrency": 4, "seconds": 1.0, "chunks": 64, "idle_seconds": 2.0, "overhead": points,
    }  # fmt: skip
    section = report.markdown(result)
    idle_column = len(report.OVERHEAD) + 1  # the proxy, the measures, then idle
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `")]
    assert [row[idle_column].rstrip(" |") for row in rows] == ["0.0", "12.5"]
    assert "CPU idle (ms per s)" not in [
        line.split(" | ")[0].lstrip("| ") for line in section.splitlines()
    ]
    assert "no calls for 2.0 s before each repetition" in section


def test_cpu_against_the_prompt_length_ratios_and_growth_per_proxy() -> None:
    points = [
        _point("agentrt", 0, prompt_cpu_us_1000=400.0, prompt_cpu_us_128000=2000.0),
        _point("vllm-router", 0, prompt_cpu_us_1000=100.0, prompt_cpu_us_128000=1000.0),
        _point("agentrt", 1, prompt_cpu_us_1000=500.0, prompt_cpu_us_128000=1500.0),
        _point("vllm-router", 1, prompt_cpu_us_1000=200.0, prompt_cpu_us_128000=1000.0),
    ]
    result = {
        "command": "python benchmarks/peers.py", "versions": {"agentrt": "0.9.0"},
        "machine": "x86_64, 2 cores", "load_average": [1.0, 1.0], "reps": 2, "calls": 10,
        "concurrency": 4, "seconds": 1.0, "chunks": 64, "overhead": points,
        "prompt_words": [1000, 128000], "prompt_seconds": 3.0,
    }  # fmt: skip
    section = report.markdown(result)
    assert "sequential calls for 3.0 s per size" in section
    # ours ÷ peer per size, paired by repetition: 4.0 and 2.5 (1,000 words), 2.0 and 1.5
    assert "| CPU µs per call, 1,000-word prompt | 3.25× [2.50–4.00] |" in section
    assert "| CPU µs per call, 128,000-word prompt | 1.75× [1.50–2.00] |" in section
    # each proxy's largest ÷ smallest, per repetition: ours 5.0 and 3.0, the peer's 10 and 5
    assert "| `agentrt` | 450 [400–500] | 1,750 [1,500–2,000] | 4.0× [3.0–5.0] |" in section
    assert "| `vllm-router` | 150 [100–200] | 1,000 | 7.5× [5.0–10.0] |" in section
    assert "**`vllm-router` is ahead of ours** in CPU µs per call, 1,000-word prompt" in section


def test_prompt_bodies_repeat_their_history_and_a_proxy_answers_them(backend: int) -> None:
    first, second = (json.loads(load.overhead.prompt_body(5000, v)) for v in (0, 1))
    assert first["model"] == load.MODEL  # what the fixed-reply backend serves
    assert first["messages"][:-1] == second["messages"][:-1]  # the history repeats
    assert first["messages"][-1] != second["messages"][-1]
    assert sum(len(m["content"].split()) for m in first["messages"][:-1]) == 5000

    async def main() -> float:
        await until_answering(load, backend)
        # against the backend itself (a 200 for each call, or RuntimeError), this process's CPU
        return await load.prompt_cpu_s(backend, os.getpid(), 5000, 0.3)  # many 10 ms ticks

    assert asyncio.run(main()) > 0


def test_a_paced_stream_is_the_same_answer_sent_event_by_event(backend: int) -> None:
    async def main() -> tuple[bytes, int]:
        await until_answering(load, backend)
        conn = load.Connection(backend, stream=True, paced=True)
        await conn._open()
        conn.writer.write(conn.request)
        head = await conn.reader.readuntil(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head).group(1))
        body, reads = b"", 0
        while len(body) < length:
            body += await conn.reader.read(length - len(body))
            reads += 1
        await conn.close()
        assert await load.rate(backend, 2, 0.2, stream=True, paced=True) > 0
        return body, reads

    body, reads = asyncio.run(main())
    assert body == load._stream()  # the same events, usage and [DONE] as the unpaced answer
    assert reads > 1  # the first event comes with the head, the rest 1 ms apart
    paced_body, plain_body = load.request_body(True, paced=True), load.request_body(True)
    assert load.PACED_MARK in json.loads(paced_body)["messages"][-1]["content"]
    assert load.PACED_MARK.encode() not in plain_body
