"""Measure the HTTP limits against the attacks they answer (docs/security.md, figures).

Run from the repository root: ``python -m tests.security.measure_limits``. Starts an emulator
and a controller in front of it in this process, then, against each server:

* slow loris: ``--loris`` connections that send a partial request head and one more byte
  every second; how many are still open after the head timeout, and when the last closed;
* stalled heads: ``--stalled`` connections that each send 8 MB of one header and stop; the
  process's resident memory before and after;
* a 16 MiB body (under the limit) while ``/health`` is polled: the slowest ``/health``;
* a 32 MiB body (declared): the status and how long the answer took.

Not a test (no pass / fail): figures for the documentation. Timings depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx

from .stack import MODEL, threaded_stack


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _connect(base: str) -> socket.socket:
    parts = urlsplit(base)
    return socket.create_connection((parts.hostname, parts.port), timeout=5)


def slow_loris(base: str, count: int, seconds: float) -> dict[str, float]:
    socks = []
    for _ in range(count):
        try:
            sock = _connect(base)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            sock.setblocking(False)
            socks.append(sock)
        except OSError:
            break
    start = time.monotonic()
    open_socks = list(socks)
    last_closed = 0.0
    while open_socks and time.monotonic() - start < seconds:
        still = []
        for sock in open_socks:
            try:
                sock.send(b"X")
                data = sock.recv(1024)
                if data == b"":
                    raise ConnectionResetError
                still.append(sock)
            except BlockingIOError:
                still.append(sock)
            except OSError:
                last_closed = time.monotonic() - start
                sock.close()
        open_socks = still
        time.sleep(1.0)
    for sock in open_socks:
        sock.close()
    return {"opened": len(socks), "still_open": len(open_socks), "last_closed_s": last_closed}


def stalled_heads(base: str, count: int) -> dict[str, float]:
    before = _rss_mb()
    socks = []
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (8 * 1024 * 1024)
    for _ in range(count):
        sock = _connect(base)
        with contextlib.suppress(OSError):  # refused mid-way: the server closed
            sock.sendall(head)
        socks.append(sock)
    time.sleep(1.0)
    after = _rss_mb()
    for sock in socks:
        sock.close()
    return {"rss_before_mb": round(before, 1), "rss_after_mb": round(after, 1)}


def big_body(base: str, mib: int) -> dict[str, float]:
    content = "word " * (mib * 1024 * 1024 // 5 - 40)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}]})
    worst = 0.0
    done = threading.Event()

    def poll() -> None:
        nonlocal worst
        with httpx.Client(timeout=30) as http:
            while not done.is_set():
                start = time.perf_counter()
                http.get(base + "/health")
                worst = max(worst, time.perf_counter() - start)
                time.sleep(0.01)

    poller = threading.Thread(target=poll)
    poller.start()
    start = time.perf_counter()
    with httpx.Client(timeout=60) as http:
        try:
            status = http.post(base + "/v1/chat/completions", content=body.encode()).status_code
        except httpx.TransportError:
            status = -1  # answered and closed while the body was still being sent
    took = time.perf_counter() - start
    time.sleep(0.2)
    done.set()
    poller.join()
    return {"status": status, "answer_s": round(took, 2), "worst_health_ms": round(worst * 1e3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loris", type=int, default=500)
    parser.add_argument("--stalled", type=int, default=50)
    parser.add_argument("--header-timeout-s", type=float, default=10.0)
    args = parser.parse_args()
    limits = {"header_timeout_s": args.header_timeout_s}
    with threaded_stack(dict(limits), **limits) as stack:
        for name, base in (("controller", stack.controller_url), ("engine", stack.engine_url)):
            loris = slow_loris(base, args.loris, args.header_timeout_s + 5)
            print(name, "slow loris", loris, flush=True)
            print(name, "stalled 8 MB heads", stalled_heads(base, args.stalled), flush=True)
            print(name, "16 MiB body", big_body(base, 16 - 1), flush=True)
            print(name, "32 MiB body", big_body(base, 32), flush=True)


if __name__ == "__main__":
    main()
