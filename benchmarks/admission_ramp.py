"""The adaptive admission window's ramp, live: a burst of concurrent calls through
``agentrt controller serve`` in front of an emulated engine (or any backend URL), with the
window's slow start on and off (docs/benchmarks.md, "Admission window ramp").

Each of ``--clients`` clients sends a chat completion, and its next one as soon as the answer is
back, for ``--seconds``. Reported per run: calls completed per second over the first seconds and
overall; when the controller's queue first empties (every client's call admitted: the window no
longer limits); the controller's calls in flight to the backend after 1, 2, 4, 8 s (the window,
while calls queue at the controller); and the largest backend waiting queue it scraped.

Usage::

    python benchmarks/admission_ramp.py --clients 100 --seconds 20 --pairs 4
    python benchmarks/admission_ramp.py --engine-arg=--num-gpu-blocks=400 ...  # a KV-bound engine
    python benchmarks/admission_ramp.py --backend http://127.0.0.1:8000 --model M  # e.g. vLLM
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx

EMULATED_MODEL = "agentrt/emulated-llama-3.1-8b"
_GAUGE = re.compile(r"^([a-zA-Z_:]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def _process(command: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(url + "/health")).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not become healthy")


def _gauges(text: str) -> dict[str, float]:
    """Sum of each metric's samples (over labels)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _GAUGE.match(line)
        if match:
            out[match[1]] = out.get(match[1], 0.0) + float(match[3])
    return out


async def _burst(
    controller: str, backend: str, model: str, clients: int, seconds: float, max_tokens: int
) -> dict[str, Any]:
    done: list[float] = []
    failed = 0
    samples: list[tuple[float, float, float, float]] = []  # (t, in_flight, queued, waiting)
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(limits=limits, timeout=120.0) as http:
        start = time.monotonic()
        stop = start + seconds

        async def client(index: int) -> None:
            nonlocal failed
            turn = 0
            draw = random.Random(index)
            while time.monotonic() < stop:
                body = {
                    "model": model,
                    "messages": [{"role": "user", "content": f"client {index} turn {turn}: hi"}],
                    # Lengths vary (uniform over [max/4, max]) so the calls do not finish in
                    # synchronised waves.
                    "max_tokens": draw.randint(max(1, max_tokens // 4), max_tokens),
                }
                headers = {"x-agentrt-program-id": f"p{index}"}
                response = await http.post(
                    controller + "/v1/chat/completions", json=body, headers=headers
                )
                if response.status_code == 200:
                    done.append(time.monotonic() - start)
                else:
                    failed += 1
                turn += 1

        async def poll() -> None:
            while time.monotonic() < stop:
                now = time.monotonic() - start
                ours = _gauges((await http.get(controller + "/metrics")).text)
                # The backend's waiting queue as the controller last scraped it (what the
                # window steers by).
                queues = (await http.get(controller + "/agentrt/v1/queues")).json()
                waiting = sum(b.get("num_waiting") or 0 for b in queues.get("backends", []))
                samples.append(
                    (
                        now,
                        ours.get("agentrt_controller_in_flight_calls", 0.0),
                        ours.get("agentrt_controller_queue_length", 0.0),
                        float(waiting),
                    )
                )
                await asyncio.sleep(0.1)

        await asyncio.gather(poll(), *(client(i) for i in range(clients)))
    per_second = [sum(1 for t in done if s <= t < s + 1) for s in range(int(seconds))]
    unlimited_at = next((t for t, _, queued, _ in samples if t > 0.5 and queued == 0), None)

    def in_flight_at(when: float) -> float:
        return next((f for t, f, _, _ in samples if t >= when), float("nan"))

    return {
        "calls": len(done),
        "failed": failed,
        "calls_per_s": len(done) / seconds,
        "calls_per_s_first_5s": sum(per_second[:5]) / 5,
        "per_second": per_second,
        "queue_empty_at_s": unlimited_at,
        "in_flight_at": {f"{w:g}s": in_flight_at(w) for w in (1, 2, 4, 8)},
        "max_in_flight": max((f for _, f, _, _ in samples), default=0.0),
        "max_backend_waiting": max((w for _, _, _, w in samples), default=0.0),
        "in_flight_end": samples[-1][1] if samples else float("nan"),
        # (s, in flight, queued at the controller, backend waiting), one sample per ~0.5 s.
        "trace": [[round(t, 2), f, q, w] for i, (t, f, q, w) in enumerate(samples) if i % 5 == 0],
    }


async def _run(args: argparse.Namespace, slow_start: bool) -> dict[str, Any]:
    python = sys.executable
    agentrt = [python, "-m", "agentrt.cli"]
    with contextlib.ExitStack() as stack:
        backend = args.backend
        if backend is None:
            port = free_port()
            command = [*agentrt, "engine", "serve", "--port", str(port), *args.engine_arg]
            stack.enter_context(_process(command))
            backend = f"http://127.0.0.1:{port}"
        await _wait_ready(backend)
        port = free_port()
        admission = json.dumps({"slow_start": slow_start})
        command = [
            *agentrt, "controller", "serve", "--port", str(port), "--backend", backend,
            "--admission", admission, "--log-level", "warning",
        ]  # fmt: skip
        stack.enter_context(_process(command))
        controller = f"http://127.0.0.1:{port}"
        await _wait_ready(controller)
        await asyncio.sleep(1.5)  # a scrape or two of the idle backend
        result = await _burst(
            controller, backend, args.model, args.clients, args.seconds, args.max_tokens
        )
    result["slow_start"] = slow_start
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=2, help="A/B pairs, alternating order")
    parser.add_argument("--backend", default=None, help="a running backend instead of emulator")
    parser.add_argument("--model", default=EMULATED_MODEL)
    parser.add_argument(
        "--engine-arg", action="append", default=[], help="extra `agentrt engine serve` argument"
    )
    parser.add_argument("--json", default=None, help="write every run here")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for pair in range(args.pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)
        for slow_start in order:
            result = asyncio.run(_run(args, slow_start))
            result["load_1m"] = os.getloadavg()[0]
            runs.append(result)
            brief = {k: v for k, v in result.items() if k != "trace"}
            print(json.dumps(brief), flush=True)
    for slow_start in (False, True):
        mine = [r for r in runs if r["slow_start"] is slow_start]
        for key in ("calls_per_s_first_5s", "calls_per_s", "queue_empty_at_s"):
            values = [r[key] for r in mine if r[key] is not None]
            if values:
                print(
                    f"slow_start={slow_start} {key}: median {statistics.median(values):.3g} "
                    f"[{min(values):.3g}, {max(values):.3g}] of {len(values)}/{len(mine)}"
                )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(runs, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
