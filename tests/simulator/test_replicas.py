"""Controller replicas: the consistent-hash ring, the balancer, and the simulator with N
dispatchers over the same engines (docs/simulator.md, "Controller replicas")."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest

from agentrt.cli import main
from agentrt.errors import ConfigError
from agentrt_controller.replicas import (
    ConsistentHashRing,
    ReplicaBalancer,
    replica_names,
    ring_hash,
)
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_emulator.core.types import EngineConfig
from agentrt_sim.plan import compile_program
from agentrt_sim.registry import PolicySpec, build_policies
from agentrt_sim.runner import BenchConfig, run_one
from agentrt_sim.sim import Simulation

pytestmark = pytest.mark.timeout(120)

KEYS = [f"mixed-{i}" for i in range(8000)]


# -- the ring -------------------------------------------------------------------------------


def test_ring_hash_is_a_fixed_function_of_the_text() -> None:
    # BLAKE2b, not Python's per-process salted hash(): another process, another machine or a
    # table computed offline agree.
    assert ring_hash("program-1") == 1484712685013776058
    assert ring_hash("") == 16476032584258269876


def test_ring_is_stable_across_instances_and_name_order() -> None:
    names = replica_names(4)
    one = ConsistentHashRing(names)
    other = ConsistentHashRing(list(reversed(names)))
    assert [one.replica_for(k) for k in KEYS] == [other.replica_for(k) for k in KEYS]
    assert all(one.replica_for(k) == one.replica_for(k) for k in KEYS[:100])


@pytest.mark.parametrize("count", [2, 4, 8])
def test_ring_spreads_keys_evenly(count: int) -> None:
    ring = ConsistentHashRing(replica_names(count))
    shares = Counter(ring.replica_for(k) for k in KEYS)
    fair = len(KEYS) / count
    assert set(shares) == set(replica_names(count))
    assert all(0.85 * fair <= n <= 1.15 * fair for n in shares.values()), shares


def test_a_leaving_replica_moves_only_its_own_keys() -> None:
    ring = ConsistentHashRing(replica_names(4))
    smaller = ring.without("controller-2")
    moved = 0
    for key in KEYS:
        before, after = ring.replica_for(key), smaller.replica_for(key)
        assert after != "controller-2"
        if before != "controller-2":
            assert after == before  # nobody else's program changes replica
        else:
            moved += 1
    assert 0.85 * len(KEYS) / 4 <= moved <= 1.15 * len(KEYS) / 4
    # and its keys spread over the remaining replicas rather than all landing on one
    heirs = Counter(smaller.replica_for(k) for k in KEYS if ring.replica_for(k) == "controller-2")
    assert len(heirs) == 3


def test_a_joining_replica_takes_keys_only_for_itself() -> None:
    ring = ConsistentHashRing(replica_names(4))
    larger = ring.with_replica("controller-4")
    moved = [k for k in KEYS if ring.replica_for(k) != larger.replica_for(k)]
    assert all(larger.replica_for(k) == "controller-4" for k in moved)
    assert 0.8 * len(KEYS) / 5 <= len(moved) <= 1.2 * len(KEYS) / 5


@pytest.mark.parametrize(
    ("names", "virtual_nodes"),
    [([], 160), (["a", "a"], 160), (["a", ""], 160), (["a"], 0), (["a"], True)],
)
def test_ring_rejects_bad_configuration(names: list[str], virtual_nodes: int) -> None:
    with pytest.raises(ConfigError):
        ConsistentHashRing(names, virtual_nodes=virtual_nodes)


def test_ring_rejects_removing_an_unknown_replica() -> None:
    with pytest.raises(ConfigError, match="unknown replica"):
        ConsistentHashRing(["a", "b"]).without("c")


# -- the balancer ---------------------------------------------------------------------------


def test_balancer_by_program_follows_the_ring_and_by_call_takes_turns() -> None:
    ring = ConsistentHashRing(replica_names(3))
    by_program = ReplicaBalancer(3, "program")
    assert [by_program.pick(k) for k in KEYS[:50]] == [
        int(ring.replica_for(k).rsplit("-", 1)[1]) for k in KEYS[:50]
    ]
    by_call = ReplicaBalancer(3, "call")
    assert [by_call.pick("same-program") for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


@pytest.mark.parametrize(("count", "shard"), [(0, "program"), (2, "tenant"), (True, "call")])
def test_balancer_rejects_bad_configuration(count: int, shard: str) -> None:
    with pytest.raises(ConfigError):
        ReplicaBalancer(count, shard)


# -- the simulator --------------------------------------------------------------------------

BENCH = BenchConfig(
    workload="mixed",
    rate_per_s=0.3,
    duration_s=60.0,
    seed=5,
    drain_s=float("inf"),  # run every program to its end: calls per replica add up exactly
    engine=EngineConfig(max_model_len=131072, max_num_seqs=8),
)


@pytest.fixture(scope="module")
def plans() -> list:  # type: ignore[type-arg]
    return [compile_program(p) for p in BENCH.programs()]


def _metrics(summary: dict) -> dict:  # type: ignore[type-arg]
    return {k: v for k, v in summary.items() if k not in ("replica_calls",)}


@pytest.mark.parametrize("shard", ["program", "call"])
def test_one_replica_is_exactly_the_single_controller(plans: list, shard: str) -> None:  # type: ignore[type-arg]
    plain = run_one(plans, BENCH, PolicySpec()).summary
    one = run_one(plans, BENCH, PolicySpec(replicas=1, shard=shard)).summary
    assert one == plain | {"shard": shard}
    assert plain["programs_completed"] > 5


def _replica_run(
    plans: list,  # type: ignore[type-arg]
    spec: PolicySpec,
    seen: list[tuple[int, str]] | None = None,
) -> Simulation:
    """Run ``plans`` under ``spec``; ``seen`` collects (replica, program id) per submitted call."""
    sim = Simulation(plans, BENCH.sim_config(), build_policies(spec))
    if seen is not None:
        for index, dispatcher in enumerate(sim.dispatchers):
            submit = dispatcher.submit

            def recording(  # type: ignore[no-untyped-def]
                facts: CallFacts, now_s: float, index: int = index, submit=submit, **kw
            ) -> CallEntry:
                seen.append((index, facts.program.program_id))
                return submit(facts, now_s, **kw)  # type: ignore[no-any-return]

            dispatcher.submit = recording  # type: ignore[method-assign]
    sim.run()
    return sim


def test_sharded_by_program_every_call_of_a_program_meets_one_replica(plans: list) -> None:  # type: ignore[type-arg]
    seen: list[tuple[int, str]] = []
    sim = _replica_run(plans, PolicySpec(replicas=4, shard="program"), seen)
    record = sim.record
    assert record.unfinished_programs == 0
    assert record.programs_on_several_replicas == 0
    ring = ConsistentHashRing(replica_names(4))
    assert len(seen) == sum(p.calls for p in record.programs) > 0
    for replica, program_id in seen:  # each call went to its program's ring replica
        assert ring.replica_for(program_id) == f"controller-{replica}"
    assert record.replica_calls == [sum(1 for r, _ in seen if r == i) for i in range(4)]
    assert all(n > 0 for n in record.replica_calls)
    assert all(not d.table.keys() for d in sim.dispatchers)  # every program's end reached it


def test_sharded_by_call_a_program_spreads_over_replicas(plans: list) -> None:  # type: ignore[type-arg]
    sim = _replica_run(plans, PolicySpec(replicas=4, shard="call"))
    record = sim.record
    # start, calls, tool events and end take turns over the replicas: almost every program
    # (all but a few whose requests happened to come round to the same replica) is split
    assert record.programs_on_several_replicas >= 0.8 * len(record.programs)
    calls = record.replica_calls
    assert max(calls) - min(calls) <= 0.05 * sum(calls) / 4  # round robin: even load
    # a program's end reaches one replica: the others keep its fragment until the idle timeout
    assert sum(len(d.table.keys()) for d in sim.dispatchers) > len(record.programs) // 2


def test_split_window_gives_each_replica_its_share_of_the_batch(plans: list) -> None:  # type: ignore[type-arg]
    sim = Simulation(plans, BENCH.sim_config(), build_policies(PolicySpec(replicas=4)))
    split = Simulation(
        plans, BENCH.sim_config(), build_policies(PolicySpec(replicas=4, replica_window="split"))
    )
    assert [v.max_num_seqs for v in sim._views(0.0, 1)] == [8]
    assert [v.max_num_seqs for v in split._views(0.0, 1)] == [2]


@pytest.mark.parametrize(
    "spec",
    [
        PolicySpec(replicas=0),
        PolicySpec(replicas=2, shard="tenant"),
        replace(PolicySpec(replicas=2), replica_window="halves"),
    ],
)
def test_bad_replica_specs_are_config_errors(spec: PolicySpec) -> None:
    with pytest.raises(ConfigError):
        build_policies(spec)


# -- the command line -----------------------------------------------------------------------


def test_cli_compares_replica_counts_and_shard_modes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "sim", "--workload", "react", "--rate", "1", "--duration", "20"]
    argv += ["--replicas", "1,2", "--shard", "program,call", "--json", "--no-progress"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["replicas"], r["shard"]) for r in rows] == [
        (1, "program"),
        (2, "program"),
        (2, "call"),
    ]
    assert rows[1]["programs_on_several_replicas"] == 0
    assert rows[2]["programs_on_several_replicas"] > 0
    assert sum(rows[1]["replica_calls"]) == sum(rows[2]["replica_calls"]) > 0
    assert rows[1]["retained_lane_calls"] >= 0 and "retained_lane_calls" not in rows[0]
    assert rows[2]["process_table_entries_at_end"] > rows[1]["process_table_entries_at_end"]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--replicas", "0", "--replicas takes integers >= 1"),
        ("--replicas", "two", "--replicas takes integers >= 1"),
        ("--shard", "tenant", "--shard takes program or call"),
        ("--replica-window", "halves", "--replica-window takes shared or split"),
    ],
)
def test_cli_rejects_bad_replica_options(
    capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    argv = ["bench", "sim", "--workload", "react", "--rate", "1", "--duration", "5"]
    assert main([*argv, "--replicas", "2", option, value, "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_counting_other_replicas_load_changes_nothing_for_one_replica(plans: list) -> None:  # type: ignore[type-arg]
    """The simulator's gauges are exact: one controller sees no other load, and its run is the
    default run; with 4 replicas each one's window now counts the others' calls, and the run
    differs (docs/simulator.md, "Controller replicas")."""
    counting = {"count_other_load": True}

    def summary(replicas: int, options: dict[str, bool]) -> dict:  # type: ignore[type-arg]
        spec = PolicySpec(replicas=replicas, admission_options=options)
        return run_one(plans, BENCH, spec).summary

    assert summary(1, counting) == summary(1, {})
    four, four_counting = summary(4, {}), summary(4, counting)
    assert four_counting["calls_completed"] == four["calls_completed"]  # every program ends
    assert four_counting["e2e_latency_s"] != four["e2e_latency_s"]
