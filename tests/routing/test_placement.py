"""A program's placement by its engine's KV: the prefix router sends a program's first call to
the engine whose KV is least used, while its follow-up calls stay with their context
(docs/routing.md, "Placing a program by its engine's KV")."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.affinity import ProgramAffinity
from agentrt_controller.routing.factory import build_router
from agentrt_controller.routing.hashing import token_block_hashes
from agentrt_controller.routing.pipeline import PipelineRouter
from agentrt_controller.routing.prefix_index import PrefixIndex
from agentrt_controller.routing.scorers import PrefixCostScorer
from agentrt_controller.scheduling.api import BackendView
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(30)

#: A 15,000-token system prompt every program shares (a coding agent's instructions and tool
#: schemas), then each program's own history.
SYSTEM = list(range(15_000))


def _prompt(program: int, own_tokens: int) -> list[int]:
    return SYSTEM + [1_000_000 * (program + 1) + i for i in range(own_tokens)]


def _route(
    router: PipelineRouter, program: int, tokens: list[int], views: list[BackendView]
) -> str:
    call = make_call(
        f"p{program}", 0.0, prompt_tokens=len(tokens), block_hashes=token_block_hashes(tokens, 16)
    )
    backend = router.route(call, views, 0.0)
    router.on_finish(call, backend, 0.0)
    return backend


def _prefix(**options: object) -> PipelineRouter:
    router = build_router("prefix", options)
    assert isinstance(router, PipelineRouter)
    return router


# b0 holds the shared system prompt and the histories of programs 0-2 (their decodes read
# 60 % of its KV); b1 runs no more calls than b0 but holds little (10 %).
BUSY = BackendView("b0", in_flight=3, kv_cache_usage=0.6)
IDLE = BackendView("b1", in_flight=3, kv_cache_usage=0.1)


def _warm(router: PipelineRouter) -> None:
    for program in (0, 1, 2):  # the system prompt becomes shared (3 programs)
        _route(router, program, _prompt(program, 2_000), [BUSY])


@pytest.mark.parametrize(
    ("options", "new_program_goes_to"),
    [({}, "b1"), ({"placement_kv_weight": 0}, "b0")],
)
def test_a_new_program_goes_where_the_kv_is_least_used(
    options: dict[str, object], new_program_goes_to: str
) -> None:
    router = _prefix(**options)
    _warm(router)
    # Without the placement term the shared prompt's discounted prefill (1,500 tokens) is the
    # only difference: every new program joins b0, whatever its calls will read there.
    assert _route(router, 9, _prompt(9, 300), [BUSY, IDLE]) == new_program_goes_to


def test_a_bound_program_stays_with_its_context_however_full_its_engine() -> None:
    router = _prefix()
    _warm(router)
    # Program 0's 2,000 own tokens cost 0.2 s to recompute on b1, far less than the
    # placement term's difference (4 × 17,500 × 0.5 tokens): it is a follow-up, not a
    # placement.
    assert _route(router, 0, _prompt(0, 2_500), [BUSY, IDLE]) == "b0"
    # Once the program ended its binding is gone: a call under its id places it afresh.
    router.on_program_end(ProgramKey.untagged("p0"), 1.0)
    assert _route(router, 0, _prompt(0, 2_500), [BUSY, IDLE]) == "b1"


def test_unknown_kv_usage_costs_nothing() -> None:
    router = _prefix()
    _warm(router)
    unknown = BackendView("b1", in_flight=3)
    # An engine whose usage is not scraped pays no placement cost (as if empty) ...
    assert _route(router, 9, _prompt(9, 300), [BUSY, unknown]) == "b1"
    # ... and with no usage known anywhere, the cached shared prompt decides, as before.
    assert _route(router, 10, _prompt(10, 300), [BackendView("b0", in_flight=3), unknown]) == "b0"


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "many", True])
def test_bad_placement_kv_weight_name_the_field(value: object) -> None:
    with pytest.raises(ConfigError, match="placement_kv_weight"):
        build_router("prefix", {"placement_kv_weight": value})


def test_the_placement_term_needs_the_routers_affinity() -> None:
    with pytest.raises(ConfigError, match="affinity"):
        PrefixCostScorer(
            PrefixIndex(),
            prefill_s_per_token=1e-4,
            queued_s_per_call=0.0128,
            placement_kv_weight=4,
        )
    scorer = PrefixCostScorer(
        PrefixIndex(),
        prefill_s_per_token=1e-4,
        queued_s_per_call=0.0128,
        placement_kv_weight=4,
        affinity=ProgramAffinity(),
    )
    assert scorer.placement_s(BUSY, 1000) == pytest.approx(1e-4 * 4 * 1000 * 0.6)
    assert scorer.placement_s(BackendView("b", in_flight=0), 1000) == 0.0
