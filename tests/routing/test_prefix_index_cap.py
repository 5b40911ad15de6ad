"""The prefix index is bounded by default: at most ``DEFAULT_CAPACITY_BLOCKS`` elements per
backend, least recently used forgotten first; ``capacity_blocks=None`` lifts the cap."""

from __future__ import annotations

import pytest

from agentrt_controller.routing.factory import build_router
from agentrt_controller.routing.pipeline import PipelineRouter
from agentrt_controller.routing.prefix_index import DEFAULT_CAPACITY_BLOCKS, PrefixIndex

pytestmark = pytest.mark.timeout(60)


def _index(router: object) -> PrefixIndex:
    assert isinstance(router, PipelineRouter)
    (index,) = [o for o in router.observers if isinstance(o, PrefixIndex)]
    return index


def test_the_default_index_keeps_at_most_the_cap_per_backend() -> None:
    index = PrefixIndex()
    assert index.capacity_blocks == DEFAULT_CAPACITY_BLOCKS == 65_536
    chains = [tuple(range(start, start + 1000)) for start in range(0, 70_000, 1000)]
    for second, chain in enumerate(chains):
        index.insert("a", chain, float(second))
    index.insert("b", chains[0], 0.0)
    assert index.size("a") == DEFAULT_CAPACITY_BLOCKS  # 70,000 recorded, the oldest dropped
    assert index.size("b") == 1000  # per backend
    assert index.match("a", chains[-1], 70.0) == 1000  # the newest are kept
    assert index.match("a", chains[0], 70.0) == 0  # the oldest are gone


def test_the_routers_index_is_capped_unless_told_otherwise() -> None:
    assert _index(build_router("prefix")).capacity_blocks == DEFAULT_CAPACITY_BLOCKS
    assert _index(build_router("prefix", {"capacity_blocks": None})).capacity_blocks is None
    assert _index(build_router("prefix", {"capacity_blocks": 100})).capacity_blocks == 100
    pipeline = build_router("pipeline", {"scorers": [{"type": "prefix_cost"}]})
    assert _index(pipeline).capacity_blocks == DEFAULT_CAPACITY_BLOCKS
