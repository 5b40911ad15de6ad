"""benchmarks/stream_reads.py: its backend writes each token event as an HTTP chunk of its own and
its client reads whole streamed calls over keep-alive (no timing here)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(30)

reads = load_benchmark("stream_reads")


async def _chunks(port: int) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n"
        % len(reads._BODY)
        + reads._BODY
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"transfer-encoding: chunked" in head
    chunks = []
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
        chunks.append((await reader.readexactly(size + 2))[:-2])
        if size == 0:
            break
    writer.close()
    return chunks


def test_each_token_event_is_a_chunk_of_its_own_then_usage_and_done() -> None:
    async def scenario() -> list[bytes]:
        server = await asyncio.start_server(
            lambda r, w: reads._answer(r, w, 3, 0.0), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        async with server:
            chunks = await _chunks(port)
            await asyncio.wait_for(reads._client(port, 2), 10)  # two whole calls, one connection
        return chunks

    chunks = asyncio.run(scenario())
    assert chunks[:3] == [reads._EVENT] * 3
    usage, done = chunks[3].split(b"\n\n")[:2]
    assert json.loads(usage.removeprefix(b"data: "))["usage"]["completion_tokens"] == 3
    assert done == b"data: [DONE]"
    assert chunks[4] == b""


def test_relay_mode_relays_every_read_of_one_token_event() -> None:
    # --relay hands the stream's connection reads of one event by hand: every one is relayed
    # (else it fails), timed and its Python calls counted. A process of its own: the loop it
    # runs is uvloop, as the CLI's, and a failure ends with it.
    script = Path(reads.__file__)
    done = subprocess.run(
        [sys.executable, str(script), "--relay", "--reads", "20", "--json"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    for shape in ("vllm", "openai"):
        assert 0 < result[f"{shape}_us_per_read_least"] <= result[f"{shape}_us_per_read_median"]
        assert result[f"{shape}_python_calls_per_read"] > 10
