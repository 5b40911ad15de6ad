"""benchmarks/real_vllm_agents.py's parsing and reporting: vLLM's counters from a real
Prometheus page, the controller's retention view, the docs table. No vLLM needed."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(30)

LABELS = '{engine="0",model_name="tiny-llama"}'


def page(**values: float) -> str:
    """A /metrics page as vLLM prints it (HELP / TYPE lines, labelled samples, another
    exporter's lines in between)."""
    lines = ["# HELP python_gc_objects_collected_total x", "python_gc_objects_collected_total 3.0"]
    for name, value in values.items():
        lines += [f"# TYPE vllm:{name} counter", f"vllm:{name}{LABELS} {value}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("real_vllm_agents")


def test_counter_deltas_sum_labels_and_mark_missing_counters(bench: ModuleType) -> None:
    parse = bench.load_launcher().parse_metrics
    before = parse(page(prefix_cache_queries_total=100, prefix_cache_hits_total=40))
    after_text = page(
        prefix_cache_queries_total=1100, prefix_cache_hits_total=640, num_preemptions_total=2
    )
    after_text += 'vllm:prompt_tokens_total{engine="1",model_name="tiny-llama"} 7.0\n'
    deltas = bench.counter_deltas(before, parse(after_text))
    assert deltas["vllm:prefix_cache_queries_total"] == 1000
    assert deltas["vllm:prefix_cache_hits_total"] == 600
    assert deltas["vllm:num_preemptions_total"] == 2  # absent before: counted from 0
    assert deltas["vllm:prompt_tokens_total"] == 7
    assert deltas["vllm:external_prefix_cache_hits_total"] is None  # not exposed


def test_engine_row_computes_hit_rate_and_prefilled_tokens(bench: ModuleType) -> None:
    row = bench.engine_row(
        {
            "vllm:prefix_cache_queries_total": 1000.0,
            "vllm:prefix_cache_hits_total": 600.0,
            "vllm:external_prefix_cache_queries_total": 400.0,
            "vllm:external_prefix_cache_hits_total": 150.0,
            "vllm:num_preemptions_total": 3.0,
        }
    )
    assert row["hit_rate"] == pytest.approx(0.6)
    assert row["computed"] == 250  # queried - GPU hits - CPU-tier hits
    assert row["preemptions"] == 3
    assert bench.engine_row({})["hit_rate"] is None  # nothing queried: no rate


def test_controller_row_reads_the_retention_view(bench: ModuleType) -> None:
    queues = {
        "retention": {
            "retained": 0,
            "policy": {"decisions": {"retain": 39, "pin": 1}},
            "counts": {"pins": 0, "unpins": 0, "rewarms": 4, "errors": 1, "dropped": 0},
            "backends": {
                "127.0.0.1:8000": {
                    "kv_capacity_tokens": 4608,
                    "cpu_kv_capacity_tokens": 0,
                    "reload_s_per_token": None,
                    "published": True,
                }
            },
        }
    }
    row = bench.controller_row(queues)
    assert (row["rewarms"], row["errors"], row["retained_at_end"]) == (4, 1, 0)
    assert row["decisions"] == {"retain": 39, "pin": 1}
    assert row["kv_capacity_tokens"] == 4608 and row["capacity_published"] is True
    assert bench.controller_row({})["rewarms"] == 0  # retention off: zeros, no error


def test_render_prints_both_runs_from_a_saved_result(
    bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = bench.engine_row(
        {"vllm:prefix_cache_queries_total": 2000.0, "vllm:prefix_cache_hits_total": 1500.0}
    )
    result = {
        "server": "vLLM CPU, tiny model",
        "trace": {"programs": 9, "calls": 49},
        "load": [11.0, 12.0],
        "runs": [
            {"name": "direct", "completed": 9, "e2e_mean_s": 10.5, "engine": engine},
            {
                "name": "controller",
                "completed": 9,
                "e2e_mean_s": 10.7,
                "engine": engine,
                "controller": bench.controller_row({"retention": {"counts": {"rewarms": 2}}}),
            },
        ],
    }
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(result))
    assert bench.main(["--render", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "| `direct` | 9 | 10.50 | 1,500 / 2,000 | 75.0 % | — / — | — | 500 |" in out
    assert "re-warms 2" in out and "9 programs, 49 calls" in out
