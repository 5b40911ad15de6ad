"""Fixtures of the SDK tests: a shared capturing fake server (reset per test)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fakeserver import FakeServer, FakeState


@pytest.fixture(autouse=True)
def _no_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's ``OPENAI_API_KEY`` and the like do not reach the tests' configs
    (``RuntimeConfig`` reads them when ``base_url`` / ``api_key`` are not given)."""
    for name in ("AGENTRT_BASE_URL", "AGENTRT_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


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


@pytest.fixture
def capture_server() -> Iterator[str]:
    """Base URL of a fresh capture_server.py process (records agentrt headers per request)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = Path(__file__).with_name("capture_server.py")
    with subprocess.Popen(
        [sys.executable, str(script), str(port)], stdout=subprocess.PIPE
    ) as server:
        try:
            assert server.stdout is not None
            assert server.stdout.readline().strip() == b"ready"
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait(timeout=10)
