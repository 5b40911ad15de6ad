"""The per-decision optimisations make the same decisions as the code they replaced.

Three hot paths were rewritten for cost at many backends (docs/benchmarks.md, "Decision cost at
many backends"): :meth:`PrefixIndex.match` bisects instead of walking, the prefix-cost scorer
computes the prefill part once per match value, the pipeline sums clamped scores in one pass,
and :meth:`Dispatcher.admit` asks the admission policy again only about the backend that got
the last call. The reference classes below are the previous code, verbatim in substance; both
stacks are driven through the same random operations and must agree on every admission.

The pruned path (:mod:`agentrt_controller.routing.pruning`: score each match level's
least-loaded backend and the program's, not every backend) is driven against the same router
scoring every candidate, at 4 / 16 / 64 / 256 backends, with load ties, unhealthy backends,
the KV-pressure filter, stale and evicted index entries and the exact KV index synced and not.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.routing.affinity import ProgramAffinity
from agentrt_controller.routing.api import Scored, backend_load
from agentrt_controller.routing.filters import HealthyFilter, KvPressureFilter
from agentrt_controller.routing.kv_index import ExactPrefixIndex
from agentrt_controller.routing.pickers import ArgmaxPicker
from agentrt_controller.routing.pipeline import PipelineRouter, WeightedScorer, clamp_score
from agentrt_controller.routing.prefix_index import PrefixIndex
from agentrt_controller.routing.scorers import (
    AffinityScorer,
    PrefixCostScorer,
    cached_prompt_tokens,
)
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.candidates import CandidateSet
from agentrt_controller.scheduling.dispatcher import Admission, Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from tests.routing.per_element_counts import PerElementCounts

pytestmark = pytest.mark.timeout(120)


# -- the previous code ----------------------------------------------------------------------


class LinearIndex(PrefixIndex):
    """Matches by walking the chain (before bisection); counts programs per element, each
    routed call's whole head (before the counts were kept in runs)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.counts = PerElementCounts(self.popularity_capacity)

    def note_program(self, program: ProgramKey, hashes: Sequence[int]) -> None:
        self.counts.note(program, hashes)

    def shared_prefix(self, hashes: Sequence[int]) -> int:
        return self.counts.shared(hashes, self.shared_programs)

    def match(self, backend_id: str, hashes: Sequence[int], now_s: float) -> int:
        blocks = self.elements(backend_id)
        if not blocks:
            return 0
        oldest = now_s - self.ttl_s
        count = 0
        for h in hashes:
            seen = blocks.get(h)
            if seen is None or seen < oldest:
                break
            count += 1
        return count


class ReferenceCostScorer(PrefixCostScorer):
    def costs(self, call: CallEntry, backends: Sequence[BackendView], now_s: float) -> list[float]:
        hashes = call.facts.block_hashes
        a, q = self.prefill_s_per_token, self.queued_s_per_call
        shared = self.index.shared_prefix(hashes) if hashes else 0
        relief = 1.0 - self.shared_weight
        out = []
        for b in backends:
            matched = self.index.match(b.backend_id, hashes, now_s)
            cached = cached_prompt_tokens(call, matched)
            missing_shared = 0
            if shared > matched:
                missing_shared = cached_prompt_tokens(call, shared) - cached
            uncached = max(0, call.facts.prompt_tokens - cached) - relief * missing_shared
            out.append(a * max(0.0, uncached) + q * backend_load(b))
        return out


class ReferencePipeline(PipelineRouter):
    def _score(self, call: CallEntry, backends: list[BackendView], now_s: float) -> list[Scored]:
        totals = [0.0] * len(backends)
        for weighted in self.scorers:
            if weighted.weight == 0:
                continue
            scores = weighted.scorer.score(call, backends, now_s)
            for i, value in enumerate(scores):
                totals[i] += weighted.weight * clamp_score(value)
        return [Scored(b, t) for b, t in zip(backends, totals, strict=True)]


class ReferenceDispatcher(Dispatcher):
    """Asks the admission policy about every backend before every pop."""

    def admit(self, now_s: float, backends: Sequence[BackendView]) -> list[Admission]:
        views = {b.backend_id: b for b in backends}
        admissions: list[Admission] = []
        while self.queued():
            candidates = [b for b in views.values() if self.admission.has_room(b, now_s)]
            if not candidates:
                break
            call = self.queues.pop(now_s)
            if call is None:
                break
            retained = call.retained_backend
            held = [b for b in candidates if b.backend_id == retained]
            backend_id = self.router.route(call, held or candidates, now_s)
            chosen = views[backend_id]
            views[backend_id] = replace(chosen, in_flight=chosen.in_flight + 1)
            priority = self.queues.backend_priority(call) if chosen.supports_priority else None
            self.table.bind(call.facts, backend_id, now_s)
            admissions.append(Admission(call, backend_id, priority))
        return admissions


def _stack(reference: bool, *, ttl_s: float, capacity: int | None) -> Dispatcher:
    """PLAS + adaptive window + the ``prefix`` router's composition (routers.prefix_router)."""
    index_cls = LinearIndex if reference else PrefixIndex
    index = index_cls(ttl_s=ttl_s, capacity_blocks=capacity, shared_programs=3)
    affinity = ProgramAffinity(ttl_s=600.0)
    scorer_cls = ReferenceCostScorer if reference else PrefixCostScorer
    cost = scorer_cls(index, prefill_s_per_token=1e-4, queued_s_per_call=128e-4)
    router_cls = ReferencePipeline if reference else PipelineRouter
    router = router_cls(
        "prefix",
        filters=[("healthy", HealthyFilter()), ("kv_pressure", KvPressureFilter(0.95))],
        scorers=[
            WeightedScorer("prefix_cost", cost),
            WeightedScorer("affinity", AffinityScorer(affinity), 0.2),
        ],
        picker=ArgmaxPicker(),
        observers=[index, affinity],
        prune=not reference,
        prune_min_candidates=2,
    )
    scheduler = build_scheduler("plas", table=ProcessTable())
    dispatcher_cls = ReferenceDispatcher if reference else Dispatcher
    return dispatcher_cls(scheduler, router, AdaptiveWindowAdmission())


# -- the drive ------------------------------------------------------------------------------


def _drive(seed: int, backends: int, *, ttl_s: float, capacity: int | None) -> int:
    """Random rounds on both stacks; asserts equal admissions; returns calls admitted."""
    rng = random.Random(seed)
    stacks = [_stack(r, ttl_s=ttl_s, capacity=capacity) for r in (False, True)]
    ids = [f"b{i:02d}" for i in range(backends)]
    system = [[rng.getrandbits(62) for _ in range(rng.randint(1, 12))] for _ in range(3)]
    histories: dict[str, list[int]] = {}
    # per stack: call id -> (its call object there, backend)
    outstanding: list[dict[str, tuple[CallEntry, str]]] = [{}, {}]
    now = 0.0
    admitted_total = 0
    previous: dict[str, BackendView] = {}
    for round_ in range(150):
        now += rng.choice([0.01, 0.5, 2.0, min(ttl_s, 900.0) * 0.7])  # sometimes: stale
        for _ in range(rng.randint(0, 6)):
            program = f"p{rng.randrange(25)}"
            history = histories.setdefault(program, [])
            if len(history) > 40 or rng.random() < 0.05:  # the program ends, a new one starts
                for stack in stacks:
                    stack.on_program_end(ProgramKey.untagged(program), now)
                history.clear()
            history += [rng.getrandbits(62) for _ in range(rng.randint(0, 4))]
            kind = int(program[1:]) % 3
            chain = tuple(system[kind] + history) if rng.random() < 0.9 else ()
            facts = CallFacts(
                call_id=f"{program}/{round_}/{rng.getrandbits(30)}",
                program=ProgramKey.untagged(program),
                arrival_s=now,
                prompt_tokens=16 * len(chain) + rng.randint(0, 15),
                block_hashes=chain,
            )
            for stack in stacks:
                stack.submit(facts, now)
        in_flight = dict.fromkeys(ids, 0)
        for _, backend in outstanding[0].values():
            in_flight[backend] += 1
        views = [
            BackendView(
                backend_id=b,
                in_flight=in_flight[b],
                healthy=rng.random() > 0.1,
                num_running=in_flight[b],
                num_waiting=rng.choice([None, 0, 1, 3, 8]),
                kv_cache_usage=rng.choice([None, 0.3, 0.96, rng.random()]),
                metrics_at_s=now if rng.random() < 0.7 else None,
                max_num_seqs=rng.choice([None, 4, 16]),
                supports_priority=rng.random() < 0.5,
            )
            for b in ids
        ]
        # A driver reuses the view object of a backend where nothing changed (the pool does):
        # the Dispatcher may then skip asking the admission policy again.
        views = [
            previous[b.backend_id] if b.backend_id in previous and rng.random() < 0.5 else b
            for b in views
        ]
        previous = {b.backend_id: b for b in views}
        decisions = [stack.admit(now, views) for stack in stacks]
        got, want = (
            [(a.call.facts.call_id, a.backend_id, a.backend_priority) for a in d] for d in decisions
        )
        assert got == want, f"round {round_}"
        for admissions, pending in zip(decisions, outstanding, strict=True):
            for a in admissions:
                pending[a.call.facts.call_id] = (a.call, a.backend_id)
        admitted_total += len(got)
        running = sorted(outstanding[0])
        for call_id in rng.sample(running, rng.randint(0, len(running))):
            for stack, pending in zip(stacks, outstanding, strict=True):
                call, backend = pending.pop(call_id)
                stack.on_tokens(call, 20, now)
                stack.on_finish(call, backend, 1e-3 * (1 + len(call.facts.block_hashes)), now)
    return admitted_total


@pytest.mark.parametrize(
    ("seed", "backends", "ttl_s", "capacity"),
    [
        (1, 1, 600.0, None),
        (2, 4, 600.0, None),
        (3, 16, 600.0, 65_536),
        (4, 16, 5.0, None),  # entries go stale between rounds
        (5, 8, 600.0, 40),  # LRU eviction all the time
        (6, 32, 30.0, 200),
        (7, 64, math.inf, None),
    ],
)
def test_optimised_decisions_equal_the_previous_code(
    seed: int, backends: int, ttl_s: float, capacity: int | None
) -> None:
    assert _drive(seed, backends, ttl_s=ttl_s, capacity=capacity) > 100


@pytest.mark.parametrize("seed", range(6))
def test_bisection_matches_the_walk_after_random_inserts(seed: int) -> None:
    """The prefix property the bisection relies on holds under inserts, LRU eviction and the
    TTL: every chain, at every time, matches the same length both ways."""
    rng = random.Random(seed)
    capacity = rng.choice([None, 30, 100])
    bisect = PrefixIndex(ttl_s=10.0, capacity_blocks=capacity)
    walk = LinearIndex(ttl_s=10.0, capacity_blocks=capacity)
    roots = [[rng.getrandbits(62) for _ in range(rng.randint(1, 20))] for _ in range(4)]
    chains: list[tuple[int, ...]] = []
    now = 0.0
    matched = 0
    for _ in range(400):
        now += rng.choice([0.0, 0.1, 1.0, 4.0])
        base = list(rng.choice(chains)) if chains and rng.random() < 0.7 else rng.choice(roots)
        chain = tuple(base[: rng.randint(1, len(base))] + [rng.getrandbits(62) for _ in range(3)])
        chains.append(chain)
        backend = f"b{rng.randrange(3)}"
        bisect.insert(backend, chain, now)
        walk.insert(backend, chain, now)
        for probe in rng.sample(chains, min(20, len(chains))):
            for b in ("b0", "b1", "b2"):
                length = walk.match(b, probe, now)
                assert bisect.match(b, probe, now) == length
                matched += length > 0
    assert matched > 1000  # the probes did hit recorded prefixes


# -- the pruned path against scoring every candidate ------------------------------------------


def _prefix_pipeline(
    *, prune: bool, ttl_s: float, capacity: int | None, queued_tokens: float, affinity_w: float
) -> PipelineRouter:
    """``routers.prefix_router``'s composition with these parameters; pruned from 2
    candidates on (so 4 backends take the pruned path too)."""
    index = PrefixIndex(ttl_s=ttl_s, capacity_blocks=capacity, shared_programs=3)
    affinity = ProgramAffinity(ttl_s=600.0)
    cost = PrefixCostScorer(
        index,
        prefill_s_per_token=1e-4,
        queued_s_per_call=queued_tokens * 1e-4,
        exact=ExactPrefixIndex(),
    )
    return PipelineRouter(
        "prefix",
        filters=[("healthy", HealthyFilter()), ("kv_pressure", KvPressureFilter(0.95))],
        scorers=[
            WeightedScorer("prefix_cost", cost),
            WeightedScorer("affinity", AffinityScorer(affinity), affinity_w),
        ],
        picker=ArgmaxPicker(),
        observers=[index, affinity],
        prune=prune,
        prune_min_candidates=2,
    )


def _exact_of(router: PipelineRouter) -> ExactPrefixIndex:
    scorer = router.scorers[0].scorer
    assert isinstance(scorer, PrefixCostScorer) and scorer.exact is not None
    return scorer.exact


def _drive_pruned(seed: int, backends: int, *, exact: str, **params: Any) -> PipelineRouter:
    """Random rounds of calls routed by a pruned and a full router; asserts the same choice
    every time (and the same counters at the end); returns the pruned router."""
    rng = random.Random(seed)
    pruned, full = (_prefix_pipeline(prune=p, **params) for p in (True, False))
    ids = [f"b{i:03d}" for i in range(backends)]
    if exact == "synced":  # some backends' KV events are followed: those calls score in full
        for backend in rng.sample(ids, max(1, backends // 8)):
            for router in (pruned, full):
                _exact_of(router).replay_done(backend)
    system = [[rng.getrandbits(62) for _ in range(rng.randint(2, 40))] for _ in range(3)]
    histories: dict[str, list[int]] = {}
    now = 0.0
    ttl = params["ttl_s"]
    for round_ in range(60):
        now += rng.choice([0.01, 0.5, 3.0, min(ttl, 900.0) * 0.7])  # sometimes: stale
        unhealthy = rng.choice([0.0, 0.1, 0.5, 1.0])  # 1.0: the healthy filter is skipped
        pressured = rng.choice([0.0, 0.2, 1.0])  # 1.0: the KV-pressure filter is skipped
        candidates = CandidateSet(
            BackendView(
                backend_id=b,
                in_flight=rng.choice([0, 0, 1, 2, 5]),  # few values: many equal loads
                healthy=rng.random() >= unhealthy,
                num_waiting=rng.choice([None, 0, 0, 1]),
                kv_cache_usage=rng.choice([None, 0.99 if rng.random() < pressured else 0.5]),
            )
            for b in ids
            if rng.random() < 0.9
        )
        for _ in range(rng.randint(1, 12)):
            if not candidates:
                break
            program = f"p{rng.randrange(40)}"
            history = histories.setdefault(program, [])
            if len(history) > 60 or rng.random() < 0.03:
                for router in (pruned, full):
                    router.on_program_end(ProgramKey.untagged(program), now)
                history.clear()
            history += [rng.getrandbits(62) for _ in range(rng.randint(0, 5))]
            chain = tuple(system[int(program[1:]) % 3] + history) if rng.random() < 0.9 else ()
            token_chain = chain if exact != "none" and chain else ()
            call = CallEntry(
                CallFacts(
                    call_id=f"{program}/{round_}",
                    program=ProgramKey.untagged(program),
                    prompt_tokens=16 * len(chain) + rng.randint(0, 15),
                    block_hashes=chain,
                    token_block_hashes=token_chain,
                    token_block_size=16 if token_chain else 0,
                )
            )
            want = full.route(replace(call), list(candidates), now)
            got = pruned.route(call, candidates, now)
            assert got == want, f"round {round_}, {call.facts.call_id}"
            chosen = candidates.get(got)
            assert chosen is not None
            if rng.random() < 0.3:  # no room left there
                candidates.remove(got)
            else:
                candidates.update(replace(chosen, in_flight=chosen.in_flight + 1))
            if rng.random() < 0.6:  # it finished, over a longer chain
                for router in (pruned, full):
                    router.on_finish(call, got, now)
    assert pruned.routed_total == full.routed_total
    assert pruned.filter_skips == full.filter_skips
    for router in (pruned, full):
        scorer = router.scorers[0].scorer
        assert isinstance(scorer, PrefixCostScorer)
    assert pruned.scorers[0].scorer.lookups == full.scorers[0].scorer.lookups  # type: ignore[attr-defined]
    return pruned


@pytest.mark.parametrize(
    ("seed", "backends", "ttl_s", "capacity", "queued_tokens", "affinity_w", "exact"),
    [
        (11, 4, 600.0, None, 128.0, 0.2, "none"),
        (12, 16, 600.0, 65_536, 128.0, 0.2, "unsynced"),
        (13, 64, 5.0, None, 128.0, 0.2, "none"),  # entries go stale between rounds
        (14, 64, 600.0, 60, 128.0, 0.2, "synced"),  # LRU eviction all the time
        (15, 256, 600.0, None, 128.0, 0.2, "none"),
        (16, 256, 30.0, 300, 128.0, 0.2, "unsynced"),
        (17, 256, 600.0, None, 128.0, 0.2, "synced"),
        (18, 64, 600.0, None, 0.0, 0.2, "none"),  # load is free: every load ties
        (19, 64, 600.0, None, 1e-7, 0.2, "none"),  # loads within the picker's tolerance
        (20, 16, math.inf, None, 128.0, 0.0, "none"),  # no affinity scorer in the sum
        (21, 16, 600.0, None, 128.0, 1e-12, "none"),  # affinity within the tolerance
    ],
)
def test_pruned_routing_decides_as_scoring_every_backend(
    seed: int,
    backends: int,
    ttl_s: float,
    capacity: int | None,
    queued_tokens: float,
    affinity_w: float,
    exact: str,
) -> None:
    pruned = _drive_pruned(
        seed,
        backends,
        exact=exact,
        ttl_s=ttl_s,
        capacity=capacity,
        queued_tokens=queued_tokens,
        affinity_w=affinity_w,
    )
    pruning = pruned.pruning
    assert pruning is not None
    assert pruning.pruned_total > 20  # the pruned path decided calls ...
    if exact == "synced" or queued_tokens < 1 or 0 < affinity_w < 1e-9:
        assert pruning.fallback_total > 0  # ... and these fell back where they must
    assert pruned.snapshot()["pruning"] == {
        "min_candidates": 2,
        "pruned_total": pruning.pruned_total,
        "fallback_total": pruning.fallback_total,
    }


@pytest.mark.parametrize("seed", range(4))
def test_match_levels_and_holders_agree_with_every_backends_match(seed: int) -> None:
    """After ``purge_stale``, the holders are exactly who holds what, and ``match_levels`` is
    exactly the set of every backend's match (0 included), under the TTL and LRU eviction —
    also for an index that starts keeping holders late (its first ``purge_stale``)."""
    rng = random.Random(seed)
    capacity = rng.choice([None, 40, 150])
    index = PrefixIndex(ttl_s=10.0, capacity_blocks=capacity)
    late = PrefixIndex(ttl_s=10.0, capacity_blocks=capacity)
    backends = [f"b{i}" for i in range(6)]
    roots = [[rng.getrandbits(62) for _ in range(rng.randint(1, 20))] for _ in range(3)]
    chains: list[tuple[int, ...]] = []
    now = 0.0
    for step in range(300):
        now += rng.choice([0.0, 0.1, 1.0, 4.0])
        base = list(rng.choice(chains)) if chains and rng.random() < 0.7 else rng.choice(roots)
        chain = tuple(base[: rng.randint(1, len(base))] + [rng.getrandbits(62) for _ in range(3)])
        chains.append(chain)
        backend = rng.choice(backends)
        index.insert(backend, chain, now)
        late.insert(backend, chain, now)
        if step % 50 == 49:
            gone = rng.choice(backends)
            index.forget_backend(gone)
            late.forget_backend(gone)
        index.purge_stale(now)
        if step >= 150:
            late.purge_stale(now)
        for probe in rng.sample(chains, min(10, len(chains))):
            matches = {index.match(b, probe, now) for b in backends}
            assert index.match_levels(probe) == sorted(matches | {0})
            for h in probe:
                holding = {b for b in backends if index.match(b, (h,), now) == 1}
                assert set(index.holders(h)) == holding
                assert index.holder_count(h) == len(holding)
                if step >= 150:
                    assert set(late.holders(h)) == holding
    assert index.size() == sum(len(index.elements(b)) for b in backends)


def test_the_candidate_set_is_a_sequence_that_records_its_changes() -> None:
    views = [BackendView("a", 0), BackendView("b", 1), BackendView("c", 2)]
    candidates = CandidateSet(views)
    assert list(candidates) == views and candidates[1] == views[1] and len(candidates) == 3
    candidates.update(BackendView("b", 2))
    candidates.remove("a")
    assert [v.backend_id for v in candidates] == ["b", "c"]
    assert candidates[0] == BackendView("b", 2) and candidates.get("a") is None
    assert candidates.changes == ["b", "a"]
    with pytest.raises(KeyError):
        candidates.update(BackendView("zz", 0))
