"""Tenants in the simulator: tenant loads, rotating program ids, per-tenant metrics, the
fair-share scheduler driven by the simulator, and ``bench sim --tenants/--tenancy``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from agentrt.cli import main
from agentrt.errors import ConfigError
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.plan import compile_program
from agentrt_sim.registry import PolicySpec, build_policies
from agentrt_sim.runner import BenchConfig, run_one
from agentrt_sim.sim import Simulation
from agentrt_sim.workloads.program import LLMNode, Program, WaitNode
from agentrt_sim.workloads.tenants import (
    TenantLoad,
    format_tenants,
    generate_tenant_programs,
    parse_tenants,
)
from agentrt_sim.workloads.trace import load_trace, save_trace

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("well:mixed@0.5", (TenantLoad("well", "mixed", 0.5),)),
        (
            "a:react@1,b:chatbot@2:rotate:weight=3",
            (TenantLoad("a", "react", 1.0), TenantLoad("b", "chatbot", 2.0, True, 3.0)),
        ),
        (" a:mcts@0.1 , b:mcts@0.2:weight=0.5 ", None),
    ],
)
def test_parse_tenants(text: str, expected: tuple[TenantLoad, ...] | None) -> None:
    loads = parse_tenants(text)
    if expected is not None:
        assert loads == expected
    assert parse_tenants(format_tenants(loads)) == loads


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "at least one"),
        ("well", "expected NAME:WORKLOAD@RATE"),
        ("well:mixed", "expected NAME:WORKLOAD@RATE"),
        ("well:mixed@fast", "not a number"),
        ("well:mixed@0", "rate must be > 0"),
        ("well:bogus@1", "unknown workload"),
        ("well:mixed@1:greedy", "unknown option"),
        ("well:mixed@1:weight=0", "weight must be > 0"),
        ("well:mixed@1:weight=x", "not a number"),
        ("a/b:mixed@1", "tenant name"),
        ("a:mixed@1,a:react@2", "duplicate tenant"),
    ],
)
def test_parse_tenants_rejects(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_tenants(text)


def test_a_tenants_programs_do_not_depend_on_its_neighbours() -> None:
    alone = generate_tenant_programs(parse_tenants("well:mixed@0.5"), duration_s=120, seed=3)
    both = generate_tenant_programs(
        parse_tenants("well:mixed@0.5,greedy:mixed@1.5:rotate"), duration_s=120, seed=3
    )
    assert alone and all(p.tenant == "well" and not p.rotate_call_ids for p in alone)
    assert [p for p in both if p.tenant == "well"] == alone
    greedy = [p for p in both if p.tenant == "greedy"]
    assert len(greedy) > 2 * len(alone)
    assert all(p.rotate_call_ids and p.program_id.startswith("greedy/") for p in greedy)
    assert all(p.system_prompt_id.startswith("greedy/") for p in greedy)
    assert [p.arrival_s for p in both] == sorted(p.arrival_s for p in both)


def test_trace_keeps_tenant_and_rotation(tmp_path: Path) -> None:
    programs = generate_tenant_programs(
        parse_tenants("a:react@1,b:chatbot@1:rotate"), duration_s=20, seed=1
    )
    path = tmp_path / "tenants.jsonl"
    save_trace(programs, path)
    assert load_trace(path) == sorted(programs, key=lambda p: (p.arrival_s, p.program_id))


def _chain(program_id: str, tenant: str, *, rotate: bool = False, calls: int = 4) -> Program:
    nodes: list[LLMNode | WaitNode] = []
    parent: tuple[str, ...] = ()
    for index in range(calls):
        call = LLMNode(f"c{index}", parent, "main", parent[0] if parent else None, 20, 30)
        nodes.append(call)
        tool = WaitNode(f"t{index}", (call.node_id,), "main", "tool", "search", 0.5, call.node_id)
        nodes.append(tool)
        parent = (tool.node_id,)
    return Program(
        program_id,
        "chain",
        0.0,
        "sys",
        100,
        10,
        tuple(nodes[:-1]),
        tenant=tenant,
        rotate_call_ids=rotate,
    )


def test_rotating_program_sends_fresh_ids_and_leaves_no_table_entries() -> None:
    """Every call of a rotating program is its own one-call program at the controller; the
    simulator ends each one, so the process table is empty at the end. Charged service is
    recorded per tenant and the shares add up to one."""
    bench = BenchConfig(duration_s=10.0, warmup_s=0.0, drain_s=100.0)
    programs = [_chain("w", "well"), _chain("g", "greedy", rotate=True)]
    seen: list[str] = []
    policies = build_policies(PolicySpec("plas", "round_robin", "off", 4, tenancy=True))
    scheduler = policies.dispatcher.scheduler
    original = scheduler.submit

    def spy(call: object, now_s: float) -> None:
        seen.append(f"{call.facts.program.tenant}:{call.facts.program.program_id}")  # type: ignore[attr-defined]
        original(call, now_s)  # type: ignore[arg-type]

    scheduler.submit = spy  # type: ignore[method-assign]
    sim = Simulation([compile_program(p) for p in programs], bench.sim_config(), policies)
    record = sim.run()
    assert sorted(seen) == sorted(
        ["greedy:g#c0", "greedy:g#c1", "greedy:g#c2", "greedy:g#c3"] + ["well:w"] * 4
    )
    assert len(policies.dispatcher.table) == 0
    assert {p.tenant for p in record.programs} == {"well", "greedy"}
    assert set(record.tenant_service_s) == {"well", "greedy"}
    # the same calls: about the same charge (only prefix-cache hits differ)
    charged = record.tenant_service_s
    assert charged["well"] == pytest.approx(charged["greedy"], rel=0.05)
    snapshot = scheduler.snapshot(sim.now_s)
    assert {t["tenant"] for t in snapshot["tenancy"]["tenants"]} == {"well", "greedy"}


def _summary(bench: BenchConfig, spec: PolicySpec) -> dict[str, object]:
    plans = [compile_program(p) for p in bench.programs()]
    return run_one(plans, bench, spec).summary


def test_one_tenant_runs_the_same_with_tenancy_on_or_off() -> None:
    bench = BenchConfig(
        duration_s=60.0,
        seed=2,
        tenants=parse_tenants("solo:react@1.5"),
        engine=EngineConfig(max_model_len=131072, max_num_seqs=4),
    )
    off = _summary(bench, PolicySpec("plas", "round_robin", "off", 4))
    on = _summary(bench, PolicySpec("plas", "round_robin", "off", 4, tenancy=True))
    assert off["tenancy"] is False and on["tenancy"] is True
    for key in ("e2e_latency_s", "token_latency_s", "programs_completed", "tenants"):
        assert off[key] == on[key]


def test_fair_shares_close_the_rotation_hole() -> None:
    """A small engine (2 batch slots) over capacity: a tenant rotating ids at 3x the rate of
    a well-behaved one takes the well-behaved tenant's service under bare PLAS. With tenancy
    the well-behaved tenant gets what it asks for (its charged service alone) or half of all
    service, whichever is less (max-min fairness), and its mean E2E drops."""
    engine = EngineConfig(max_model_len=131072, max_num_seqs=2)
    loads = "well:react@0.25,greedy:react@0.75:rotate"
    bench = BenchConfig(
        duration_s=240.0, seed=1, drain_s=240.0, tenants=parse_tenants(loads), engine=engine
    )
    alone = _summary(
        dataclasses.replace(bench, tenants=parse_tenants("well:react@0.25")),
        PolicySpec("plas", "round_robin", "off", 2),
    )
    off = _summary(bench, PolicySpec("plas", "round_robin", "off", 2))
    on = _summary(bench, PolicySpec("plas", "round_robin", "off", 2, tenancy=True))

    def tenant(summary: dict[str, object], name: str) -> dict[str, Any]:
        tenants: dict[str, dict[str, Any]] = summary["tenants"]  # type: ignore[assignment]
        return tenants[name]

    demand = tenant(alone, "well")["charged_service_s"]
    total_on = sum(tenant(on, name)["charged_service_s"] for name in ("well", "greedy"))
    fair = min(demand, 0.5 * total_on)
    assert tenant(on, "well")["charged_service_s"] >= 0.9 * fair
    assert tenant(off, "well")["charged_service_s"] < 0.9 * fair
    assert (
        tenant(on, "well")["e2e_latency_s"]["mean"] < tenant(off, "well")["e2e_latency_s"]["mean"]
    )


def test_cli_tenants_json_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "bench",
        "sim",
        "--tenants",
        "well:chatbot@1,greedy:chatbot@2:rotate:weight=2",
        "--tenancy",
        "off,on",
        "--duration",
        "20",
        "--json",
    ]
    assert main(argv) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["tenancy"] for r in results] == [False, True]
    for result in results:
        assert result["workload"] == "tenants"
        assert result["tenant_loads"] == "well:chatbot@1,greedy:chatbot@2:rotate:weight=2"
        assert result["rate"] == 3.0
        assert set(result["tenants"]) == {"well", "greedy"}
        shares = [t["service_share"] for t in result["tenants"].values()]
        assert sum(shares) == pytest.approx(1.0)
        for tenant in result["tenants"].values():
            assert {"programs_completed", "programs_unfinished", "charged_service_s"} <= set(tenant)
    assert main([*argv[:-1]]) == 0  # the tables
    out = capsys.readouterr().out
    assert "per tenant" in out and "greedy" in out
    for bad, message in [
        (["--tenants", "well:chatbot@1", "--rate", "2"], "drop --rate"),
        (["--tenants", "well:chatbot@1", "--tenancy", "maybe"], "--tenancy takes"),
        (["--tenants", "well:chatbot"], "expected NAME:WORKLOAD@RATE"),
    ]:
        assert main(["bench", "sim", *bad, "--duration", "5"]) == 2
        assert message in capsys.readouterr().err


def test_help_explains_the_tenant_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "sim", "--help"])
    text = capsys.readouterr().out
    assert "--tenants" in text and "rotate" in text and "--tenancy" in text


def test_cli_tenancy_modes_fair_and_isolate(capsys: pytest.CaptureFixture[str]) -> None:
    """``--tenancy fair,isolate,isolate=F``: fair shares of the queue only, and with the
    per-tenant caps on calls in flight (scheduling/isolation.py) at their default or given
    surplus share; each run says which."""
    argv = ["bench", "sim", "--tenants", "well:chatbot@1,greedy:chatbot@3:rotate"]
    argv += ["--tenancy", "fair,isolate,isolate=0.5", "--duration", "20", "--json"]
    argv += ["--isolation-option", "reservation_s=5", "--max-num-seqs", "4"]
    assert main(argv) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["tenancy_mode"] for r in results] == [
        "fair",
        "isolate(reservation_s=5)",
        "isolate(surplus_share=0.5,reservation_s=5)",
    ]
    assert all(r["tenancy"] is True for r in results)
    for bad, message in [
        ("isolate=2", "tenant_isolation.surplus_share: must be <= 1, got 2.0"),
        ("isolate=x", "--tenancy isolate=F takes"),
        ("fair=1", "--tenancy takes"),
    ]:
        assert main(["bench", "sim", "--tenants", "w:chatbot@1", "--tenancy", bad]) == 2
        assert message in capsys.readouterr().err


def test_isolation_spec_builds_the_dispatcher_caps() -> None:
    on = build_policies(PolicySpec(tenancy=True, isolation={"enabled": True}))
    assert on.dispatcher.isolation is not None
    assert on.dispatcher.isolation.config.surplus_share == pytest.approx(1.0)
    default = build_policies(PolicySpec(tenancy=True))  # the controller's default: caps off
    assert default.dispatcher.isolation is None
    fair = build_policies(PolicySpec(tenancy=True, isolation={"enabled": False}))
    assert fair.dispatcher.isolation is None
    with pytest.raises(ConfigError, match="surplus_share"):
        build_policies(PolicySpec(tenancy=True, isolation={"surplus_share": 3}))
