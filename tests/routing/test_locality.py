"""Locality: moves counted per program; the prefix router's KV-fill cost spreads new programs
and keeps a long context where it is (docs/routing.md, "Keeping a program's context where it
is")."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.factory import build_router
from agentrt_controller.routing.hashing import token_block_hashes
from agentrt_controller.routing.pipeline import PipelineRouter
from agentrt_controller.scheduling.api import BackendView
from tests.controller_policies.helpers import make_call

pytestmark = pytest.mark.timeout(30)

#: A 15,000-token system prompt every program shares, then each program's own history.
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


def test_moves_are_counted_per_program_and_forgotten_at_its_end() -> None:
    router = build_router("least_loaded")
    assert isinstance(router, PipelineRouter)
    for backend_load in ((0, 1), (1, 0), (1, 0)):  # p's three calls: b0, b1, b1
        views = [
            BackendView("b0", in_flight=backend_load[0]),
            BackendView("b1", in_flight=backend_load[1]),
        ]
        router.route(make_call("p", 0.0, prompt_tokens=500), views, 0.0)
    assert router.locality.snapshot() == {
        "followup_calls": 2,
        "moved_calls": 1,
        "moved_context_tokens": 500,
        "programs_moved": 1,
    }
    assert router.snapshot()["locality"] == router.locality.snapshot()
    router.on_program_end(ProgramKey.untagged("p"), 1.0)
    assert len(router.locality) == 0


def test_kv_fill_sends_a_new_program_to_the_emptier_engine_and_keeps_a_long_context() -> None:
    # b0 holds the shared system prompt and program 0's 40,000-token history, and is 98 % full;
    # b1 is nearly empty.
    full, empty = (
        BackendView("b0", in_flight=2, kv_cache_usage=0.98),
        BackendView("b1", in_flight=0, kv_cache_usage=0.1),
    )
    placement_off = {"placement_kv_weight": 0}  # the fill cost alone (test_placement.py)
    for options, new_program_goes_to in (
        (placement_off, "b0"),
        ({**placement_off, "kv_full_tokens": 8192}, "b1"),
    ):
        router = _prefix(max_kv_usage=1.0, **options)
        for program in (0, 1, 2):  # the system prompt becomes shared (3 programs)
            _route(router, program, _prompt(program, 40_000), [full])
        # Without the fill cost, the shared prompt's discounted prefill (1,500 tokens) outweighs
        # the load of two calls: the new program joins the full engine.
        assert _route(router, 9, _prompt(9, 200), [full, empty]) == new_program_goes_to
        # Program 0's next call stays with its 40,000-token context either way.
        assert _route(router, 0, _prompt(0, 41_000), [full, empty]) == "b0"


@pytest.mark.parametrize(
    ("field", "value"),
    [("kv_full_tokens", -1), ("kv_free_usage", 1.0), ("kv_free_usage", float("nan"))],
)
def test_bad_kv_fill_settings_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        build_router("prefix", {field: value})
