"""The named routers: least_loaded, autellix (Algorithm 2), prefix (cost + affinity), failover."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.api import Router
from agentrt_controller.routing.factory import build_router
from agentrt_controller.routing.hashing import token_block_hashes
from agentrt_controller.scheduling.api import BackendView
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(30)

#: A program of the default session.
K = ProgramKey.untagged


def _view(backend_id: str, in_flight: int = 0, **kw: object) -> BackendView:
    return BackendView(backend_id, in_flight=in_flight, **kw)  # type: ignore[arg-type]


def _route(
    router: Router, program: str, views: Sequence[BackendView], now: float = 0.0, **kw: object
) -> str:
    call = make_call(program, now, **kw)
    backend = router.route(call, views, now)
    router.on_finish(call, backend, now)
    return backend


@pytest.mark.parametrize(
    ("loads", "waiting", "healthy", "expected"),
    [
        ((3, 1, 2), (None, None, None), (True, True, True), "b1"),
        # Scraped waiting counts on top of in-flight.
        ((3, 1, 2), (0, 5, 0), (True, True, True), "b2"),
        # Ties go to the smaller id.
        ((2, 2, 2), (None, None, None), (True, True, True), "b0"),
        # An unhealthy backend is never chosen while another is up.
        ((3, 0, 2), (None, None, None), (True, False, True), "b2"),
    ],
)
def test_least_loaded(
    loads: tuple[int, ...],
    waiting: tuple[int | None, ...],
    healthy: tuple[bool, ...],
    expected: str,
) -> None:
    views = [
        _view(f"b{i}", load, num_waiting=w, healthy=h)
        for i, (load, w, h) in enumerate(zip(loads, waiting, healthy, strict=True))
    ]
    assert _route(build_router("least_loaded"), "p", views) == expected


def test_autellix_short_calls_balance_and_long_calls_stay_on_the_first_engine() -> None:
    router = build_router("autellix")
    idle = [_view("b0", 5), _view("b1", 0), _view("b2", 3)]
    assert _route(router, "p", idle, prompt_tokens=500) == "b1"  # first call binds p to b1
    busy = [_view("b0", 0), _view("b1", 9), _view("b2", 0)]
    assert _route(router, "p", busy, prompt_tokens=2048) == "b0"  # <= 2048: least loaded
    assert _route(router, "p", busy, prompt_tokens=2049) == "b1"  # long: first engine
    # Its engine is down: fail over to the least loaded, but stay bound to the first.
    down = [_view("b0", 0), _view("b1", 0, healthy=False), _view("b2", 4)]
    assert _route(router, "p", down, prompt_tokens=5000) == "b0"
    assert _route(router, "p", busy, prompt_tokens=5000) == "b1"
    router.on_program_end(K("p"), 1.0)
    assert _route(router, "p", busy, prompt_tokens=5000) == "b0"  # forgotten: rebinds


def test_autellix_threshold_is_configurable() -> None:
    router = build_router("autellix", {"threshold_tokens": 100})
    assert _route(router, "p", [_view("b0", 0), _view("b1", 1)], prompt_tokens=10) == "b0"
    assert _route(router, "p", [_view("b0", 5), _view("b1", 0)], prompt_tokens=101) == "b0"


def _prompt(program: int, tokens: int) -> list[int]:
    return [program * 1_000_000 + i for i in range(tokens)]


def test_prefix_follows_the_cached_context_until_load_outweighs_it() -> None:
    router = build_router("prefix", {"affinity_weight": 0.0})
    ctx = _prompt(1, 3000)
    hashes = token_block_hashes(ctx, 16)
    views = [_view("b0", 0), _view("b1", 0), _view("b2", 0)]
    first = _route(router, "p", views, prompt_tokens=3000, block_hashes=hashes)
    assert first == "b0"  # nothing cached anywhere: tie by id
    # The next call extends the context: it goes where the context is, though busier...
    longer = ctx + _prompt(2, 500)
    nxt = {"prompt_tokens": 3500, "block_hashes": token_block_hashes(longer, 16)}
    loaded = [_view("b0", 4), _view("b1", 0), _view("b2", 0)]
    assert _route(router, "p", loaded, 1.0, **nxt) == "b0"
    # ...unless the queue there costs more than recomputing 3,000 tokens elsewhere.
    flooded = [_view("b0", 30), _view("b1", 0), _view("b2", 0)]
    assert _route(router, "p", flooded, 2.0, **nxt) == "b1"


def test_prefix_shares_system_prompts_across_programs() -> None:
    router = build_router("prefix", {"affinity_weight": 0.0})
    system = _prompt(0, 3000)
    views = [_view("b0", 0), _view("b1", 0)]
    a = system + _prompt(1, 100)
    assert (
        _route(router, "a", views, prompt_tokens=3100, block_hashes=token_block_hashes(a, 16))
        == "b0"
    )
    b = system + _prompt(2, 100)
    busier = [_view("b0", 2), _view("b1", 0)]
    assert (
        _route(router, "b", busier, prompt_tokens=3100, block_hashes=token_block_hashes(b, 16))
        == "b0"
    )


def test_prefix_uses_affinity_when_the_call_has_no_hashes() -> None:
    router = build_router("prefix")
    views = [_view("b0", 0), _view("b1", 0)]
    assert _route(router, "p", [_view("b0", 1), _view("b1", 0)], prompt_tokens=3000) == "b1"
    # Equal or slightly more load (cost within 1/(1 - 0.2) of the cheapest): it stays on b1.
    assert _route(router, "p", views, prompt_tokens=3000) == "b1"
    assert _route(router, "p", [_view("b0", 0), _view("b1", 1)], prompt_tokens=3000) == "b1"
    # Much more load: it moves (and the binding follows).
    assert _route(router, "p", [_view("b0", 0), _view("b1", 8)], prompt_tokens=3000) == "b0"
    assert _route(router, "p", views, prompt_tokens=3000) == "b0"


def test_prefix_avoids_full_and_dead_engines() -> None:
    router = build_router("prefix")
    hashes = token_block_hashes(_prompt(1, 2000), 16)
    call = {"prompt_tokens": 2000, "block_hashes": hashes}
    assert _route(router, "p", [_view("b0"), _view("b1")], **call) == "b0"
    full = [_view("b0", kv_cache_usage=0.99), _view("b1", kv_cache_usage=0.5)]
    assert _route(router, "p", full, 1.0, **call) == "b1"
    dead = [_view("b0", healthy=False), _view("b1", 30)]
    assert _route(router, "p", dead, 2.0, **call) == "b1"
    # Everything full: the filter steps aside rather than failing the call.
    all_full = [_view("b0", kv_cache_usage=0.99), _view("b1", kv_cache_usage=0.99)]
    assert _route(router, "q", all_full, 3.0, **call) in {"b0", "b1"}


def test_prefix_index_expires_with_its_ttl() -> None:
    router = build_router("prefix", {"block_ttl_s": 10.0, "affinity_weight": 0.0})
    hashes = token_block_hashes(_prompt(1, 4000), 16)
    call = {"prompt_tokens": 4000, "block_hashes": hashes}
    assert _route(router, "p", [_view("b0"), _view("b1", 1)], **call) == "b0"
    later = [_view("b0", 1), _view("b1", 0)]
    assert _route(router, "q", later, 5.0, **call) == "b0"  # still cached
    assert _route(router, "r", later, 30.0, **call) == "b1"  # stale: load decides


def test_prefix_spreads_a_shared_system_prompt_instead_of_piling_onto_one_engine() -> None:
    system = _prompt(0, 3000)
    for weight, expected in ((0.1, "b1"), (1.0, "b0")):
        router = build_router("prefix", {"affinity_weight": 0.0, "shared_weight": weight})
        for i in range(3):  # three programs made the system prompt known as shared, on b0
            prompt = system + _prompt(10 + i, 200)
            call = {"prompt_tokens": 3200, "block_hashes": token_block_hashes(prompt, 16)}
            assert _route(router, f"p{i}", [_view("b0"), _view("b1", 5)], **call) == "b0"
        # b0 is now 6 calls busier. Recomputing the shared prompt on b1 is paid once, so it
        # weighs little (shared_weight 0.1) and the load decides; counted in full it does not.
        fresh = system + _prompt(99, 200)
        call = {"prompt_tokens": 3200, "block_hashes": token_block_hashes(fresh, 16)}
        assert _route(router, "new", [_view("b0", 6), _view("b1", 0)], 1.0, **call) == expected
