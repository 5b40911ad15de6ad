"""Memory-aware admission (docs/scheduling.md, "Admission under memory pressure"): the ledger,
the rule and the Dispatcher's order, with worked numbers.

Every test uses one backend of 100,000 tokens of KV and the default watermark 0.9: a new
program's prefill may fill up to 90,000 tokens, a resident program's call up to 100,000.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.cost_model import CostModel
from agentrt_controller.keys import ProgramKey
from agentrt_controller.policies import PolicyConfig, build_dispatcher
from agentrt_controller.routing.round_robin import RoundRobinRouter
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.basic import FixedWindowAdmission
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.scheduling.candidates import CandidateSet
from agentrt_controller.scheduling.dispatcher import Dispatcher
from agentrt_controller.scheduling.factory import build_scheduler
from agentrt_controller.scheduling.memory import (
    MemoryAdmission,
    MemoryAdmissionConfig,
    _Ledger,
    memory_priority,
)
from agentrt_controller.service.config import load_config
from agentrt_controller.service.core.policies import build_dispatcher as service_dispatcher
from tests.controller_policies.helpers import make_facts

pytestmark = pytest.mark.timeout(30)

CAPACITY = 100_000


class Pin(NamedTuple):
    """What the retention driver reports of a pin (``RetentionDriver.pinned``)."""

    program: ProgramKey
    tokens: int
    due_s: float


def _view(backend_id: str = "b0", in_flight: int = 1, **kw: object) -> BackendView:
    values: dict[str, object] = {"kv_capacity_tokens": CAPACITY, **kw}
    return BackendView(backend_id, in_flight=in_flight, **values)  # type: ignore[arg-type]


def _run_call(memory: MemoryAdmission, facts: CallFacts, out: int, now_s: float) -> None:
    """Admit ``facts`` to b0, stream ``out`` tokens, finish it at ``now_s``."""
    memory.on_admit(facts, _view(), now_s).add(out)
    memory.on_finish(facts, now_s)


def test_new_program_fits_under_the_watermark_resident_call_under_capacity() -> None:
    memory = MemoryAdmission()
    a = make_facts("A", prompt_tokens=40_000)
    _run_call(memory, a, 1_000, 0.0)  # A holds 41,000
    b = make_facts("B", prompt_tokens=30_000)
    memory.on_admit(b, _view(), 0.0)  # B runs: holds 30,000
    assert memory.demand_tokens("b0", 1.0) == 71_000
    # A new program: 71,000 + 20,000 = 91,000 > 90,000 (watermark); 19,000 lands on it.
    assert not memory.fits(make_facts("C", prompt_tokens=20_000), _view(), 1.0)
    assert memory.fits(make_facts("C", prompt_tokens=19_000), _view(), 1.0)
    # A's next call extends its 41,000 by a 2,000-token tool result: growth 2,000, and
    # 73,000 <= 100,000. Even 29,000 more fits (100,000), 29,001 does not.
    assert memory.fits(make_facts("A", prompt_tokens=43_000), _view(), 1.0)
    assert memory.fits(make_facts("A", prompt_tokens=70_000), _view(), 1.0)
    assert not memory.fits(make_facts("A", prompt_tokens=70_001), _view(), 1.0)


def test_an_idle_resident_stops_reserving_unless_pinned() -> None:
    memory = MemoryAdmission(MemoryAdmissionConfig(idle_release_s=10.0))
    a = make_facts("A", prompt_tokens=40_000)
    _run_call(memory, a, 1_000, 0.0)
    memory.on_admit(make_facts("B", prompt_tokens=30_000), _view(), 0.0)
    c = make_facts("C", prompt_tokens=20_000)
    assert not memory.fits(c, _view(), 9.0)  # A idle 9 s: still reserved (71,000)
    assert memory.fits(c, _view(), 10.0)  # idle 10 s: released; 30,000 + 20,000
    assert memory.demand_tokens("b0", 10.0) == 30_000

    pinned = MemoryAdmission(MemoryAdmissionConfig(idle_release_s=10.0))
    pins = [Pin(a.program, 41_000, 30.0)]
    pinned.pinned = lambda backend_id: pins if backend_id == "b0" else []
    _run_call(pinned, a, 1_000, 0.0)
    pinned.on_admit(make_facts("B", prompt_tokens=30_000), _view(), 0.0)
    assert pinned.demand_tokens("b0", 20.0) == 71_000  # pinned: A is due back at 30 s
    assert not pinned.fits(c, _view(), 20.0)


def test_a_pin_of_a_program_not_resident_counts_and_the_program_ends() -> None:
    other = ProgramKey.untagged("P")
    memory = MemoryAdmission(pinned=lambda backend_id: [Pin(other, 50_000, 5.0)])
    memory.on_admit(make_facts("B", prompt_tokens=30_000), _view(), 0.0)
    assert memory.demand_tokens("b0", 1.0) == 80_000
    assert not memory.fits(make_facts("C", prompt_tokens=10_001), _view(), 1.0)
    memory.on_program_end(ProgramKey.untagged("B"))
    assert memory.demand_tokens("b0", 1.0) == 50_000


def test_short_contexts_reserve_nothing_and_are_never_held() -> None:
    memory = MemoryAdmission()  # threshold: a thirty-second of 100,000 = 3,125
    for name in "ABCDEFGHIJ":  # ten programs of 3,000 tokens: 30,000 in all
        memory.on_admit(make_facts(name, prompt_tokens=3_000), _view(), 0.0)
    assert memory.demand_tokens("b0", 1.0) == 0
    memory.on_admit(make_facts("L", prompt_tokens=88_000), _view(), 0.0)
    assert memory.demand_tokens("b0", 1.0) == 88_000
    # 91,124 > 90,000, but cheap to recompute: admitted; 3,125 is held.
    assert memory.fits(make_facts("K", prompt_tokens=3_124), _view(), 1.0)
    assert not memory.fits(make_facts("K", prompt_tokens=3_125), _view(), 1.0)


@pytest.mark.parametrize(
    ("capacity", "threshold"),
    [
        (470_000, 8_192),  # an A100 with Llama-3-8B: at most 8,192
        (262_144, 8_192),
        (196_608, 6_144),  # a thirty-second
        (100_000, 3_125),
        (65_536, 2_048),
        (1_920, 2_048),  # a tiny engine: at least 2,048 (ReAct contexts never held)
        (None, 8_192),  # unknown: the rule does not act, the ledger counts from 8,192
    ],
)
def test_the_default_threshold_is_a_thirty_second_of_the_capacity_within_bounds(
    capacity: int | None, threshold: int
) -> None:
    memory = MemoryAdmission()
    assert memory.min_context(_view(kv_capacity_tokens=capacity)) == threshold
    fixed = MemoryAdmission(MemoryAdmissionConfig(min_context_tokens=8_192))
    assert fixed.min_context(_view(kv_capacity_tokens=capacity)) == 8_192


def test_a_configured_capacity_sets_the_threshold_of_backends_that_report_none() -> None:
    configured = MemoryAdmission(MemoryAdmissionConfig(kv_capacity_tokens=131_072))
    assert configured.min_context(_view(kv_capacity_tokens=None)) == 4_096
    assert configured.min_context(_view(kv_capacity_tokens=65_536)) == 2_048  # reported wins


def test_the_ledger_recounts_when_the_capacity_becomes_known() -> None:
    memory = MemoryAdmission()
    repo = (1, 300)  # 4,800 tokens the two programs share
    a = make_facts("A", prompt_tokens=6_000, block_hashes=_chain(repo, (2, 75)))
    b = make_facts("B", prompt_tokens=7_000, block_hashes=_chain(repo, (3, 137)))
    unknown = _view(kv_capacity_tokens=None)
    memory.on_admit(a, unknown, 0.0)
    memory.on_admit(b, unknown, 0.0)
    assert memory.demand_tokens("b0", 1.0) == 0  # both under 8,192
    # The first metrics sample: 65,536 tokens, a threshold of 2,048. Both count now, the
    # repository once: 6,000 + 7,000 - 4,800.
    memory.on_admit(make_facts("C", prompt_tokens=100), _view(kv_capacity_tokens=65_536), 1.0)
    snapshot = memory.snapshot(1.0)["backends"]
    assert snapshot == {"b0": {"demand_tokens": 8_200, "residents": 3, "min_context_tokens": 2_048}}
    # And back (a restart with more memory): nothing counts again.
    memory.on_admit(make_facts("C", prompt_tokens=100), _view(kv_capacity_tokens=None), 2.0)
    assert memory.demand_tokens("b0", 2.0) == 0


def _chain(*segments: tuple[int, int]) -> tuple[int, ...]:
    """A block-hash chain: ``(seed, blocks)`` segments, each block chained to its parent as
    the routers' hashes are, so two chains share exactly their common prefix."""
    out: list[int] = []
    parent = 0
    for seed, blocks in segments:
        for index in range(blocks):
            parent = hash((parent, seed, index))
            out.append(parent)
    return tuple(out)


def test_a_prefix_shared_by_residents_is_counted_once() -> None:
    memory = MemoryAdmission()
    repo = (1, 1_000)  # 16,000 tokens of system prompt and repository, 16 tokens a block
    a = make_facts("A", prompt_tokens=20_000, block_hashes=_chain(repo, (2, 250)))
    b = make_facts("B", prompt_tokens=24_000, block_hashes=_chain(repo, (3, 500)))
    memory.on_admit(a, _view(), 0.0)
    memory.on_admit(b, _view(), 0.0)
    assert memory.demand_tokens("b0", 1.0) == 20_000 + 24_000 - 16_000
    # A's next turn extends its own chain: only its new blocks count, the shared ones still once.
    a2 = make_facts("A", prompt_tokens=30_000, block_hashes=_chain(repo, (2, 250), (4, 625)))
    memory.on_admit(a2, _view(), 2.0)
    assert memory.demand_tokens("b0", 3.0) == 30_000 + 24_000 - 16_000
    # A new program on the same repository needs room for its own part only: 60,000 tokens
    # of which 16,000 are there, 38,000 + 44,000 = 82,000 <= 90,000 (98,000 if counted
    # whole); with 70,000 tokens, 38,000 + 54,000 = 92,000 is held.
    c = make_facts("C", prompt_tokens=60_000, block_hashes=_chain(repo, (5, 2_750)))
    assert memory.fits(c, _view(), 3.0)
    c = make_facts("C", prompt_tokens=70_000, block_hashes=_chain(repo, (5, 3_375)))
    assert not memory.fits(c, _view(), 3.0)
    assert not memory.fits(make_facts("D", prompt_tokens=60_000), _view(), 3.0)  # no chain
    memory.on_program_end(a.program)
    assert memory.demand_tokens("b0", 3.0) == 24_000  # B alone: nothing shared any more
    memory.on_program_end(b.program)
    assert memory.demand_tokens("b0", 3.0) == 0
    ledger = memory._ledgers["b0"]
    assert ledger.refs == {} and ledger.shared_blocks == 0  # nothing left behind


def test_shared_blocks_count_at_the_calls_tokens_per_element() -> None:
    """The controller's chains are over text: an element is as many tokens as its model's
    learned factor makes of 64 characters (``CallFacts.block_tokens``), 12.8 here."""

    def text(program: str, tokens: int, chain: tuple[int, ...], per: float = 12.8) -> CallFacts:
        return make_facts(program, prompt_tokens=tokens, block_hashes=chain, block_tokens=per)

    memory = MemoryAdmission()
    repo = (1, 1_000)  # 12,800 tokens at 12.8 a block
    memory.on_admit(text("A", 20_000, _chain(repo, (2, 250))), _view(), 0.0)
    memory.on_admit(text("B", 24_000, _chain(repo, (3, 500))), _view(), 0.0)
    assert memory.demand_tokens("b0", 1.0) == 20_000 + 24_000 - 12_800
    # A new program on the repository: 12,800 of its 60,000 are there, 31,200 + 47,200 =
    # 78,400 <= 90,000; of 72,000, 31,200 + 59,200 = 90,400 is held.
    c = _chain(repo, (5, 2_000))
    assert memory.fits(text("C", 60_000, c), _view(), 1.0)
    assert not memory.fits(text("C", 72_000, c), _view(), 1.0)
    # counted at 16 tokens a block it would fit: 31,200 + 56,000 = 87,200
    assert memory.fits(text("C", 72_000, c, per=16.0), _view(), 1.0)
    # A factor learned later applies to the blocks counted before: the same text.
    memory.on_admit(text("A", 20_000, _chain(repo, (2, 250)), per=16.0), _view(), 2.0)
    assert memory.demand_tokens("b0", 3.0) == 20_000 + 24_000 - 16_000


def test_a_context_below_the_minimum_shares_nothing() -> None:
    memory = MemoryAdmission()  # threshold 3,125
    repo = (1, 150)  # 2,400 tokens
    memory.on_admit(make_facts("A", prompt_tokens=3_000, block_hashes=_chain(repo)), _view(), 0.0)
    b = make_facts("B", prompt_tokens=30_000, block_hashes=_chain(repo, (2, 1_000)))
    memory.on_admit(b, _view(), 0.0)
    assert memory.demand_tokens("b0", 1.0) == 30_000  # A reserves nothing, so nothing shared


def test_a_cpu_tier_is_room_too() -> None:
    memory = MemoryAdmission()
    memory.on_admit(make_facts("B", prompt_tokens=85_000), _view(), 0.0)
    new = make_facts("C", prompt_tokens=20_000)  # 105,000 against 90,000 of GPU room
    assert not memory.fits(new, _view(), 1.0)
    # What memory cannot hold is offloaded and reloaded, not recomputed: 15,000 over 90,000
    # fit in a 15,000-token tier, not in one of 14,999.
    assert memory.fits(new, _view(cpu_kv_capacity_tokens=15_000), 1.0)
    assert not memory.fits(new, _view(cpu_kv_capacity_tokens=14_999), 1.0)


def test_deadlock_guard_unknown_capacity_and_disabled_always_admit() -> None:
    memory = MemoryAdmission()
    memory.on_admit(make_facts("B", prompt_tokens=95_000), _view(), 0.0)
    huge = make_facts("C", prompt_tokens=500_000)
    assert not memory.fits(huge, _view(in_flight=1), 1.0)
    assert memory.fits(huge, _view(in_flight=0), 1.0)  # nothing of ours runs there
    assert memory.fits(huge, _view(kv_capacity_tokens=None), 1.0)
    off = MemoryAdmission(MemoryAdmissionConfig(enabled=False))
    off.on_admit(make_facts("B", prompt_tokens=95_000), _view(), 0.0)
    assert off.fits(huge, _view(), 1.0)


def test_a_program_whose_calls_move_is_resident_only_where_they_go() -> None:
    memory = MemoryAdmission()
    a = make_facts("A", prompt_tokens=40_000)
    memory.on_admit(a, _view(), 0.0)
    memory.on_finish(a, 1.0)
    memory.on_admit(make_facts("A", prompt_tokens=42_000), _view("b1"), 2.0)
    assert memory.demand_tokens("b0", 2.0) == 0
    assert memory.demand_tokens("b1", 2.0) == 42_000


@pytest.mark.parametrize(
    ("tokens", "priority"),
    [(0, 8), (2_047, 8), (2_048, 7), (12_400, 5), (48_000, 3), (85_000, 2), (300_000, 0)],
)
def test_memory_priority_runs_the_largest_contexts_first(tokens: int, priority: int) -> None:
    # 8 - floor(log2(tokens / 1024)): 12,400 -> log2 12.1 = 3.6 -> 5; 85,000 -> 6.4 -> 2.
    assert memory_priority(tokens) == priority


def test_config_is_checked_by_field() -> None:
    with pytest.raises(ConfigError, match="start_watermark"):
        MemoryAdmissionConfig(start_watermark=0)
    with pytest.raises(ConfigError, match="idle_release_s"):
        MemoryAdmissionConfig.from_mapping({"idle_release_s": -1})
    with pytest.raises(ConfigError, match="bogus"):
        MemoryAdmissionConfig.from_mapping({"bogus": 1})


# --- the Dispatcher --------------------------------------------------------------------------


def _dispatcher(policy: str = "fcfs", **memory: object) -> Dispatcher:
    return Dispatcher(
        build_scheduler(policy),
        RoundRobinRouter(),
        FixedWindowAdmission(None),
        memory=MemoryAdmission(MemoryAdmissionConfig(**memory)),  # type: ignore[arg-type]
    )


def _admit(d: Dispatcher, facts: CallFacts, now_s: float) -> CallEntry:
    entry = d.submit(facts, now_s)
    [admission] = d.admit(now_s, [_view(in_flight=0)])
    assert admission.call is entry
    return entry


def test_resident_calls_pass_a_new_program_that_does_not_fit_which_keeps_its_place() -> None:
    d = _dispatcher()
    a = make_facts("A", prompt_tokens=60_000)
    _admit(d, a, 0.0)  # A runs: 60,000
    new = make_facts("N", prompt_tokens=40_000)  # 100,000 > 90,000: held
    d.submit(new, 1.0)
    a2 = make_facts("A", prompt_tokens=62_000)  # growth 2,000: 62,000 <= 100,000
    d.submit(a2, 1.0)
    admitted = d.admit(1.0, [_view(in_flight=1)])
    assert [x.call.facts for x in admitted] == [a2]
    assert d.queued() == 1
    # A ends: N is the next call out, and now fits.
    d.on_program_end(a.program, 2.0)
    assert [x.call.facts for x in d.admit(2.0, [_view(in_flight=1)])] == [new]
    assert d.memory is not None and d.memory.held_total == 1


def test_no_program_start_overtakes_a_held_one_unless_it_invested_more() -> None:
    d = _dispatcher()
    a = make_facts("A", prompt_tokens=60_000)
    _admit(d, a, 0.0)
    # R ran before (attained service 3 s) and was released idle; it comes back with 5,000.
    d.table.call_arrived(make_facts("R", call_id="r0"), 0.0)
    d.table.call_started(make_facts("R", call_id="r0"), 0.0)
    d.table.call_finished(make_facts("R", call_id="r0"), 3.0, 0.0)
    big = make_facts("N1", prompt_tokens=40_000)  # 100,000 > 90,000: held
    later = make_facts("N2", prompt_tokens=10_000)  # would fit (70,000), but starts later
    back = make_facts("R", prompt_tokens=10_000)  # invested 3 s > N1's 0: may pass it
    short = make_facts("S", prompt_tokens=2_000)  # a short prompt is never held
    for facts in (big, later, back, short):
        d.submit(facts, 1.0)
    admitted = d.admit(1.0, [_view(in_flight=1)])
    assert [x.call.facts for x in admitted] == [back, short]
    assert d.queued() == 2


def test_priority_under_memory_pressure_is_the_memory_priority() -> None:
    d = _dispatcher()
    a = _admit(d, make_facts("A", prompt_tokens=85_000), 0.0)  # 85,000 <= 90,000: no pressure
    d.on_tokens(a, 6_000, 0.5)  # A holds 91,000 > 90,000: pressure
    d.on_finish(a, "b0", 1.0, 1.0)
    a2 = make_facts("A", prompt_tokens=92_000)
    d.submit(a2, 1.0)
    [admission] = d.admit(1.0, [_view(in_flight=1, supports_priority=True)])
    assert admission.backend_priority == memory_priority(92_000) == 2
    b = make_facts("B", prompt_tokens=1_000)
    fresh = _dispatcher()
    fresh.submit(b, 0.0)
    [plain] = fresh.admit(0.0, [_view(in_flight=0, supports_priority=True)])
    assert plain.backend_priority == 0  # no pressure: the scheduler's (FCFS: 0)


def test_streamed_reads_grow_the_admitted_call_only_until_it_finishes() -> None:
    d = _dispatcher()
    a = _admit(d, make_facts("A", prompt_tokens=2_000), 0.0)  # below 3,125: not counted
    d.on_tokens(a, 1_000, 0.1)  # 3,000: still not
    assert d.memory is not None and d.memory.demand_tokens("b0", 0.1) == 0
    d.on_tokens(a, 500, 0.2)  # 3,500: counted from now on
    assert d.memory.demand_tokens("b0", 0.2) == 3_500
    d.on_tokens(a, 500, 0.3)
    assert d.memory.demand_tokens("b0", 0.3) == 4_000
    d.requeue(a, 0.4)  # put back: its record is gone, a late read grows nothing
    assert a.context is None
    d.on_tokens(a, 1_000, 0.4)
    assert d.memory.demand_tokens("b0", 0.4) == 4_000
    [again] = d.admit(0.5, [_view(in_flight=0)])
    assert again.call is a and a.context is not None
    d.on_tokens(a, 4_000, 0.6)  # its context anew (2,000 + 4,000) passes A's 4,000
    assert d.memory.demand_tokens("b0", 0.6) == 6_000
    d.on_finish(a, "b0", 1.0, 0.7)
    d.on_tokens(a, 1_000, 0.8)
    assert a.context is None and d.memory.demand_tokens("b0", 0.8) == 6_000


def test_unlimited_window_or_disabled_builds_no_memory_rule() -> None:
    assert build_dispatcher(PolicyConfig()).memory is not None
    assert build_dispatcher(PolicyConfig(admission_window=None)).memory is None
    off = PolicyConfig(memory_admission={"enabled": False})
    assert build_dispatcher(off).memory is None


def test_a_configured_capacity_serves_backends_that_report_none() -> None:
    memory = MemoryAdmission(MemoryAdmissionConfig(kv_capacity_tokens=CAPACITY))
    memory.on_admit(make_facts("B", prompt_tokens=80_000), _view(), 0.0)
    stock = _view(kv_capacity_tokens=None)  # a stock vLLM: no capacity in its metrics
    assert not memory.fits(make_facts("C", prompt_tokens=10_001), stock, 1.0)
    assert memory.fits(make_facts("C", prompt_tokens=10_000), stock, 1.0)  # 90,000


def test_the_controller_config_section_reaches_the_dispatcher() -> None:
    env = {"AGENTRT_CONTROLLER_MEMORY_ADMISSION": '{"kv_capacity_tokens": 470000}'}
    dispatcher = service_dispatcher(load_config(env=env), CostModel())
    assert dispatcher.memory is not None
    assert dispatcher.memory.config.kv_capacity_tokens == 470_000
    bad = {"AGENTRT_CONTROLLER_MEMORY_ADMISSION": '{"start_watermark": 2}'}
    with pytest.raises(ConfigError, match=r"memory_admission\.start_watermark"):
        load_config(env=bad)


def test_under_fair_shares_a_held_call_keeps_its_tenants_charge() -> None:
    d = Dispatcher(
        build_scheduler("plas", tenancy={}),
        RoundRobinRouter(),
        FixedWindowAdmission(None),
        memory=MemoryAdmission(),
    )
    a = make_facts("A", tenant="t2", prompt_tokens=60_000)
    d.submit(a, 0.0)
    assert len(d.admit(0.0, [_view(in_flight=0)])) == 1  # t2's A runs: 60,000

    def charges() -> dict[str, tuple[float, float]]:
        tenancy = d.scheduler.snapshot(1.0)["tenancy"]
        assert isinstance(tenancy, dict)
        return {t["tenant"]: (t["virtual_s"], t["in_flight_charge_s"]) for t in tenancy["tenants"]}

    held = make_facts("N", tenant="t1", prompt_tokens=40_000)  # 100,000 > 90,000
    d.submit(held, 1.0)
    before = charges()
    assert d.admit(1.0, [_view(in_flight=1)]) == []
    assert charges() == before  # popped, passed over, put back: t1 is charged nothing
    d.submit(make_facts("A", tenant="t2", prompt_tokens=62_000), 1.0)
    [admission] = d.admit(1.0, [_view(in_flight=1)])
    assert admission.call.facts.program.tenant == "t2"  # t2's resident call, in its share
    assert d.queued() == 1


def test_a_context_that_grows_past_the_minimum_is_shared_once() -> None:
    # With no minimum, a resident admitted holding nothing yet, then grown, shares its chain
    # once: its end leaves no count behind (touch and grow ask the same test).
    ledger = _Ledger(0)
    key = ProgramKey(session_id="s", program_id="A")
    chain = _chain((1, 8))
    ledger.touch(key, 0, 1, 0.0, chain)
    ledger.touch(key, 128, 0, 1.0, chain)
    assert ledger.total == 128
    ledger.remove(key)
    assert ledger.refs == {} and ledger.shared_blocks == 0 and ledger.total == 0


def test_a_program_is_resident_on_one_backend_and_leaves_it_when_it_moves_or_ends() -> None:
    memory = MemoryAdmission()  # idle_release_s: the default
    a, b = make_facts("A", prompt_tokens=20_000), make_facts("B", prompt_tokens=10_000)
    memory.on_admit(a, _view(), 0.0)
    memory.on_admit(b, _view("b1"), 0.0)
    assert (memory.demand_tokens("b0", 1.0), memory.demand_tokens("b1", 1.0)) == (20_000, 10_000)
    # A's next call goes to b1: its context now grows there, b0 holds nothing of it.
    moved = make_facts("A", call_id="a2", prompt_tokens=25_000)
    memory.on_admit(moved, _view("b1"), 2.0)
    assert (memory.demand_tokens("b0", 3.0), memory.demand_tokens("b1", 3.0)) == (0, 35_000)
    memory.on_finish(a, 3.0)  # its first call ends on b0, where A is no longer resident
    assert memory.demand_tokens("b0", 3.0) == 0
    memory.on_program_end(a.program)
    assert memory.demand_tokens("b1", 3.0) == 10_000
    # B, idle and released after idle_release_s, may come back anywhere.
    memory.on_finish(b, 4.0)
    later = 4.0 + memory.config.idle_release_s
    assert memory.demand_tokens("b1", later) == 0
    memory.on_admit(make_facts("B", call_id="b2", prompt_tokens=12_000), _view(), later)
    memory.on_program_end(b.program)
    assert memory.demand_tokens("b0", later) == memory.demand_tokens("b1", later) == 0


def test_the_router_gets_the_rounds_candidate_set_when_every_candidate_fits() -> None:
    dispatcher = build_dispatcher(PolicyConfig())
    assert dispatcher.memory is not None
    given: list[Sequence[BackendView]] = []
    route = dispatcher.router.route

    def recording(call: CallEntry, candidates: Sequence[BackendView], now_s: float) -> str:
        given.append(candidates)
        return route(call, candidates, now_s)

    dispatcher.router.route = recording  # type: ignore[method-assign]
    views = [BackendView(f"b{i}", 0, kv_capacity_tokens=CAPACITY) for i in range(3)]
    for name in ("A", "B"):
        dispatcher.submit(make_facts(name, prompt_tokens=20_000), 1.0)
    assert len(dispatcher.admit(1.0, views)) == 2
    assert all(isinstance(candidates, CandidateSet) for candidates in given)
    # Memory full on b0 for a new program: the router gets the others, as a list.
    dispatcher.submit(make_facts("C", prompt_tokens=95_000), 2.0)
    full = [BackendView("b0", 1, kv_capacity_tokens=CAPACITY), *views[1:]]
    dispatcher.memory.on_admit(make_facts("D", prompt_tokens=90_000), _view(), 2.0)
    (admitted,) = dispatcher.admit(2.0, full)
    assert not isinstance(given[-1], CandidateSet)
    assert [v.backend_id for v in given[-1]] == ["b1", "b2"] and admitted.backend_id != "b0"
