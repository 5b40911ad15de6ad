"""``benchmarks/_floor_proxy.py``, the Python floor row of the peers benchmark: it relays plain
and streamed calls to the fixed-reply backend byte for byte, round robin over its backends."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.benchmark_modules import ROOT, load_benchmark
from tests.benchmarks_peers.helpers import until_answering

pytestmark = pytest.mark.timeout(60)

peers = load_benchmark("peers")
load = peers.load
floor = load_benchmark("_floor_proxy")


def _start(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, *argv], cwd=ROOT)


@pytest.fixture
def relay() -> Iterator[tuple[int, list[int]]]:
    """A floor proxy in front of two fixed-reply backends: its port and theirs."""
    backends = [peers.free_port(), peers.free_port()]
    port = peers.free_port()
    code = "import sys; from benchmarks._peers_load import serve_backend; serve_backend({})"
    started = [_start(["-c", code.format(p)]) for p in backends]
    urls = [arg for p in backends for arg in ("--backend", f"http://127.0.0.1:{p}")]
    started.append(_start(["benchmarks/_floor_proxy.py", "--port", str(port), *urls]))
    try:
        yield port, backends
    finally:
        for process in started:
            process.terminate()
            process.wait(timeout=10)


def test_the_floor_relays_plain_and_streamed_calls(relay: tuple[int, list[int]]) -> None:
    relay, backends = relay

    async def main() -> tuple[list[float], int, int]:
        # every backend up first (a loaded machine starts them slowly), then the proxy
        for port in (*backends, relay):
            await until_answering(load, port)
        times = await load.latencies(relay, 5, warmup=1)
        # several connections at once, each with its own upstream connections
        return (
            times,
            await load.rate(relay, 4, 0.3, stream=False),
            await load.rate(relay, 4, 0.3, stream=True),
        )

    times, plain, streamed = asyncio.run(main())
    # Connection.call raises unless each answer is a whole 200 with its full body
    assert len(times) == 5 and plain > 0 and streamed > 0


def test_a_backend_down_is_a_502_not_a_hang() -> None:
    port, dead = peers.free_port(), peers.free_port()
    proxy = _start(["benchmarks/_floor_proxy.py", "--port", str(port), "--backend",
                    f"http://127.0.0.1:{dead}"])  # fmt: skip

    async def main() -> None:
        for _ in range(400):
            try:
                await load.latencies(port, 1, warmup=0)
            except OSError:
                await asyncio.sleep(0.05)
                continue

    try:
        with pytest.raises(RuntimeError, match="502"):
            asyncio.run(main())
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


def test_the_floor_is_a_reference_row_on_request(tmp_path: Path) -> None:
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    launch = peers.setup.launch("python-floor", 9, urls, "m", tmp_path, 10, "key")
    assert (
        launch.argv[1].endswith("benchmarks/_floor_proxy.py")
        and launch.argv.count("--backend") == 2
    )
    assert "python-floor" not in peers.setup.PROXIES  # not in the default run ...
    named = peers.report.parse_proxies("python-floor", peers.setup.KNOWN)  # ... but on request
    assert named == ["agentrt", "python-floor"]


def test_ours_without_the_access_log_is_a_reference_row_on_request(tmp_path: Path) -> None:
    urls = ["http://127.0.0.1:1"]
    launch = peers.setup.launch("agentrt-quiet", 9, urls, "m", tmp_path, 10, "key", ["--x"])
    assert launch.argv[1:5] == ["-m", "agentrt.cli", "controller", "serve"]
    assert launch.argv[-3:] == ["--x", "--access-log", "off"]  # ours' options, then its own
    assert "--access-log" not in peers.setup.launch("agentrt", 9, urls, "m", tmp_path, 10, "k").argv
    assert "agentrt-quiet" not in peers.setup.PROXIES
    named = peers.report.parse_proxies("agentrt-quiet", peers.setup.KNOWN)
    assert named == ["agentrt", "agentrt-quiet"]


def test_content_length_is_read_from_the_head() -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 42\r\nA: b"
    assert floor._content_length(head) == 42
    assert floor._content_length(b"GET / HTTP/1.1\r\nHost: x") == 0
