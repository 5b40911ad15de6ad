"""The round-robin pool transport uses its pools in turn and validates its sizes."""

from __future__ import annotations

import httpx
import pytest

from agentrt.errors import ConfigError
from agentrt_controller.backends.transport import RoundRobinPoolTransport

from .conftest import fake_backends
from .fake_openai import FakeState

pytestmark = pytest.mark.timeout(20)


@pytest.mark.anyio
async def test_requests_go_round_robin_over_the_pools() -> None:
    state = FakeState()
    transport = RoundRobinPoolTransport(shards=3, max_connections=6)
    async with fake_backends(state) as (url,), httpx.AsyncClient(transport=transport) as client:
        for _ in range(6):
            assert (await client.get(url + "/health")).status_code == 200
        pools = transport._pools
        connections = [len(pool._pool.connections) for pool in pools]
    assert connections == [1, 1, 1]  # each pool opened one keep-alive connection


@pytest.mark.parametrize(("shards", "connections"), [(0, 8), (4, 0)])
def test_bad_sizes_are_config_errors(shards: int, connections: int) -> None:
    with pytest.raises(ConfigError):
        RoundRobinPoolTransport(shards, connections)
