"""The routing and retention benchmarks run end to end on a tiny configuration (smoke only:
no speed is asserted here; benchmarks/ measures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(300)  # a shared 2-core machine runs these several times slower


def test_routing_benchmark_smoke(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    routing = load_benchmark("routing")
    plot = tmp_path / "routing.png"
    argv = [
        "--quick",
        "--duration",
        "15",
        "--workloads",
        "sysprompt",
        "--routers",
        "round_robin,autellix,prefix",
    ]
    assert routing.main([*argv, "--rungs", "1", "--jobs", "1", "--json", "--plot", str(plot)]) == 0
    saved = json.loads(capsys.readouterr().out)
    (result,) = saved["results"]
    assert result["workload"] == "sysprompt" and result["target_p50_s"] > 0
    assert set(result["routers"]) == {"round_robin", "autellix", "prefix"}
    for row in result["routers"].values():
        assert 0.0 <= row["hit_rate"] <= 1.0 and row["points"][0]["throughput"] > 0
    assert plot.stat().st_size > 0
    # everything but the router is the product default, charged with the controller's cost
    assert saved["setup"] == {
        "policy": "plas",
        "window": "adaptive",
        "retention": "on",
        "cost": "controller",
    }
    for row in result["routers"].values():
        at = row["at_common"]
        assert at["token_mean_s"] > 0 and at["p95_s"] >= at["mean_s"] > 0
    # The saved results render again (what --write-docs writes).
    saved_file = tmp_path / "routing.json"
    saved_file.write_text(json.dumps(saved))
    assert routing.main(["--from-json", str(saved_file), "--workloads", "sysprompt"]) == 0
    section = capsys.readouterr().out
    assert "## Routing" in section and "policy=plas window=adaptive router=<varies>" in section
    assert "| sysprompt | 1.5 | `round_robin` |" in section  # the table at the common rung


def test_sysprompt_workload_shares_a_3000_token_system_prompt() -> None:
    routing = load_benchmark("routing")
    programs = routing.sysprompt_programs(2.0, 200.0, 1)
    assert programs and {p.system_prompt_id for p in programs} == {"sys3k"}
    assert {p.system_prompt_tokens for p in programs} == {3000}
    large = [p for p in programs if p.kind == "large"]
    assert large and all(p.root_prompt_tokens == 24_000 for p in large)
    assert len(large) < 0.15 * len(programs)


def test_retention_benchmark_smoke(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    retention = load_benchmark("retention")
    argv = ["--quick", "--workloads", "react", "--rates", "0.5", "--jobs", "1", "--json"]
    assert retention.main(argv) == 0
    saved = json.loads(capsys.readouterr().out)
    configs = [row["config"] for row in saved["rows"]]
    assert configs == ["plas/off", "plas/on", "fcfs/off", "fcfs/on"]  # the baseline first
    # the product defaults around the lever, the controller's cost
    assert saved["setup"] == {"window": "adaptive", "router": "prefix", "cost": "controller"}
    for row in saved["rows"]:
        assert row["rate"] == 0.5 and row["throughput"] > 0 and 0 <= row["hit_rate"] <= 1
        assert row["token_mean_s"] > 0 and row["p95_s"] >= row["mean_s"] > 0
    # The saved rows render again, ratios to the baseline row (1.00 on itself).
    saved_file = tmp_path / "retention.json"
    saved_file.write_text(json.dumps(saved))
    assert retention.main(["--from-json", str(saved_file)]) == 0
    section = capsys.readouterr().out
    assert "## KV retention" in section and "| 0.5 | `plas/off` |" in section
    assert "| 1.00 | " in section and "window=adaptive router=prefix" in section


def test_retention_benchmark_reproduces_the_old_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    retention = load_benchmark("retention")
    argv = ["--quick", "--workloads", "react", "--rates", "0.5", "--jobs", "1", "--json"]
    old = ["--window", "32", "--router", "round_robin", "--cost", "roofline"]
    assert retention.main([*argv, *old, "--configs", "fcfs/off,atlas/on"]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert saved["setup"] == {"window": 32, "router": "round_robin", "cost": "roofline"}
    assert [row["config"] for row in saved["rows"]] == ["fcfs/off", "atlas/on"]
    with pytest.raises(SystemExit):
        retention.main([*argv, "--configs", "plas"])


def test_routing_goals_say_only_what_the_routers_run_can_say() -> None:
    routing = load_benchmark("routing")

    def result(workload: str, **throughput: float) -> dict[str, Any]:
        routers = {name: {"throughput": value} for name, value in throughput.items()}
        return {"workload": workload, "routers": routers}

    assert routing.goals([result("sysprompt", round_robin=2.0, prefix=2.5)]) == []
    (chat,) = routing.goals([result("chatbot", round_robin=2.0, prefix=3.0)])
    assert chat.startswith("prefix vs round_robin on chatbot: 1.50×") and "met" in chat
    both = routing.goals(
        [
            result("chatbot", round_robin=2.0, prefix=2.2, autellix=2.0),
            result("mixed", round_robin=1.0, prefix=0.9, autellix=1.0),
        ]
    )
    assert "1.10× (goal ≥ 1.4×: NOT met)" in both[0]
    assert both[1] == "prefix vs autellix, worst workload: 0.90× on mixed (goal ≥ 1.0×: NOT met)"
