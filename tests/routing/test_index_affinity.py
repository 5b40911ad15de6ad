"""The approximate prefix index and program affinity: matches, TTLs, LRU capacity, ends."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.affinity import ProgramAffinity
from agentrt_controller.routing.prefix_index import PrefixIndex
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(30)

#: A program of the default session.
K = ProgramKey.untagged


def test_match_counts_the_leading_run_only() -> None:
    index = PrefixIndex()
    index.insert("b0", [1, 2, 3, 4], now_s=0.0)
    assert index.match("b0", [1, 2, 3, 4, 5], 1.0) == 4
    assert index.match("b0", [1, 2, 9, 4], 1.0) == 2  # a gap ends the run
    assert index.match("b0", [7, 1, 2], 1.0) == 0
    assert index.match("b1", [1, 2], 1.0) == 0  # per backend


def test_entries_older_than_the_ttl_count_as_evicted_and_are_purged() -> None:
    index = PrefixIndex(ttl_s=10.0)
    index.insert("b0", [1, 2], now_s=0.0)
    assert index.match("b0", [1, 2], 10.0) == 2
    assert index.match("b0", [1, 2], 10.5) == 0
    index.insert("b0", [3], now_s=20.0)  # inserting purges the stale ones
    assert index.size("b0") == 1


def test_capacity_evicts_least_recently_used_and_prefixes_outlive_extensions() -> None:
    index = PrefixIndex(capacity_blocks=4)
    index.insert("b0", [1, 2, 3], now_s=0.0)
    index.insert("b0", [7, 8], now_s=1.0)  # over capacity: the chain's tail (3) goes first
    assert index.size("b0") == 4
    assert index.match("b0", [1, 2, 3], 1.0) == 2
    assert index.match("b0", [7, 8], 1.0) == 2


def test_forget_backend_and_bad_config() -> None:
    index = PrefixIndex()
    index.insert("b0", [1], now_s=0.0)
    index.forget_backend("b0")
    assert index.size() == 0
    for kwargs in ({"ttl_s": 0}, {"capacity_blocks": 0}, {"capacity_blocks": 1.5}):
        with pytest.raises(ConfigError):
            PrefixIndex(**kwargs)  # type: ignore[arg-type]


def test_index_observes_routes_and_finishes() -> None:
    index = PrefixIndex()
    call = make_call("p", block_hashes=(1, 2))
    index.on_routed(call, "b1", 0.0)
    assert index.match("b1", (1, 2, 3), 0.0) == 2
    call.facts = replace(call.facts, block_hashes=(1, 2, 3))  # the driver extended the chain
    index.on_finish(call, "b1", 1.0)
    index.on_program_end(K("p"), 2.0)  # cached prefixes outlive their program
    assert index.match("b1", (1, 2, 3), 2.0) == 3


def test_affinity_follows_the_latest_call_until_its_ttl() -> None:
    affinity = ProgramAffinity(ttl_s=5.0)
    affinity.on_routed(make_call("p"), "b0", 0.0)
    affinity.on_routed(make_call("p"), "b1", 1.0)
    assert affinity.backend_of(K("p"), 1.0) == "b1"
    affinity.on_finish(make_call("p"), "b1", 4.0)  # a finish refreshes the binding
    assert affinity.backend_of(K("p"), 9.0) == "b1"
    assert affinity.backend_of(K("p"), 9.5) is None  # expired and forgotten
    assert len(affinity) == 0


def test_sticky_affinity_keeps_the_first_backend_and_program_end_forgets() -> None:
    affinity = ProgramAffinity(ttl_s=math.inf, sticky_first=True)
    affinity.on_routed(make_call("p"), "b0", 0.0)
    affinity.on_routed(make_call("p"), "b2", 1.0)  # failover elsewhere: binding stays
    assert affinity.bound_among(make_call("p"), ["b0", "b2"], 100.0) == "b0"
    assert affinity.bound_among(make_call("p"), ["b2"], 100.0) is None
    affinity.on_program_end(K("p"), 2.0)
    assert affinity.backend_of(K("p"), 2.0) is None
    with pytest.raises(ConfigError):
        ProgramAffinity(ttl_s=0)


def test_shared_prefix_counts_programs_not_calls() -> None:
    index = PrefixIndex(shared_programs=3)
    system = [1, 2, 3]
    for _ in range(5):  # one program calling again and again shares nothing
        index.on_routed(make_call("p0", block_hashes=(*system, 10)), "b0", 0.0)
    assert index.shared_prefix([*system, 99]) == 0
    index.on_routed(make_call("p1", block_hashes=(*system, 11)), "b0", 0.0)
    index.on_routed(make_call("p2", block_hashes=(*system, 12)), "b1", 0.0)
    assert index.shared_prefix([*system, 99]) == 3  # the system prompt, not the histories
    assert index.shared_prefix([7, *system]) == 0
    small = PrefixIndex(popularity_capacity=2)
    small.note_program(K("a"), [1, 2, 3])
    assert small.shared_prefix([3]) == 0 and len(small._programs) == 2
    with pytest.raises(ConfigError):
        PrefixIndex(shared_programs=1)
