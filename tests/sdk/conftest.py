"""Fixtures of the SDK tests: a shared capturing fake server (reset per test)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fakeserver import FakeServer, FakeState


@pytest.fixture(scope="session")
def _server() -> Iterator[FakeServer]:
    server = FakeServer().start()
    yield server
    server.stop()


@pytest.fixture
def server(_server: FakeServer) -> FakeServer:
    _server.state.reset()
    return _server


@pytest.fixture
def state(server: FakeServer) -> FakeState:
    return server.state
