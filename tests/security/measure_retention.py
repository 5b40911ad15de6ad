"""Memory parked in retention (docs/security.md, "Memory parked in retention"): the figures.

Run from the repository root: ``python -m tests.security.measure_retention [--calls 40]
[--ignored-mib 8]``. Starts an emulator in this process and ``agentrt controller serve
--retention on`` in front of it as a child process (the code on ``PYTHONPATH``), then one
tagged program whose ``--calls`` threads each make one call carrying ``--ignored-mib`` MiB of a
field the backend ignores. Prints the controller's resident memory before and after, and what
its retention keeps (``GET /agentrt/v1/queues``). Before the fix every thread kept its whole
body until the program ended; now only the prompt's messages, within the tenant's budget.

:func:`park_bodies` is the scenario, shared with ``test_retention_memory.py``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio
import httpx

from agentrt.protocol import EVENTS_PREFIX, CallTags
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.ops.processes import controller_process

SESSION = "memory"
PROGRAM = "parked"
#: Retention options that make every wait worth a pin (R = 0.1 s, holding costs nothing).
PIN_EVERY_WAIT = {"kv_capacity_tokens": 100_000, "churn_tokens_per_s": 1_000_000,
                  "reuse_fraction": 0.0}  # fmt: skip


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` (MB, from ``/proc``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def thread_messages(thread: int) -> list[dict[str, str]]:
    """A thread's own conversation (about 4 KB; distinct per thread)."""
    return [
        {"role": "system", "content": f"You are agent thread {thread}. " * 100},
        {"role": "user", "content": f"question of thread {thread} " * 50},
    ]


async def park_bodies(
    http: httpx.AsyncClient,
    url: str,
    *,
    calls: int,
    ignored_bytes: int,
    headers: dict[str, str] | None = None,
) -> None:
    """One tagged program; thread ``t<i>`` makes one call with an ignored field of
    ``ignored_bytes`` characters (each thread's context stays with retention until the
    program ends). ``headers``: sent with every request (a tenant's key)."""
    auth = headers or {}
    events = f"{url}{EVENTS_PREFIX}/programs/{PROGRAM}"
    started = await http.post(
        events + "/start", json={"session_id": SESSION, "name": "probe"}, headers=auth
    )
    assert started.status_code == 200, started.text
    ignored = "x" * ignored_bytes
    for thread in range(calls):
        body = {"model": DEFAULT_MODEL_NAME, "messages": thread_messages(thread),
                "max_tokens": 2, "ignored_by_the_backend": ignored}  # fmt: skip
        tags = CallTags(session_id=SESSION, program_id=PROGRAM, thread_id=f"t{thread}",
                        node_id=f"c{thread}")  # fmt: skip
        answer = await http.post(
            url + "/v1/chat/completions",
            content=json.dumps(body),
            headers={**tags.to_headers(), **auth},
        )
        assert answer.status_code == 200, answer.text


async def retention_snapshot(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """The controller's retention counters (``GET /queues``; open mode shows them)."""
    snapshot: dict[str, Any] = (await http.get(url + EVENTS_PREFIX + "/queues")).json()
    retention: dict[str, Any] = snapshot["retention"]
    return retention


async def measure(calls: int, ignored_mib: float, options: dict[str, object]) -> dict[str, object]:
    async with (
        serve_engine(EmulatorConfig(time_scale=1000.0)) as engine,
        controller_process(
            [engine.base_url], "--retention", "on", "--retention-options", json.dumps(options)
        ) as (process, url),
        httpx.AsyncClient(timeout=60) as http,
    ):
        await park_bodies(http, url, calls=1, ignored_bytes=1024)  # imports, pools: warm
        before = rss_mb(process.pid)
        start = time.monotonic()
        await park_bodies(http, url, calls=calls, ignored_bytes=int(ignored_mib * 2**20))
        elapsed = time.monotonic() - start
        after = rss_mb(process.pid)
        retention = await retention_snapshot(http, url)
    return {
        "calls": calls,
        "ignored_mib": ignored_mib,
        "seconds": round(elapsed, 1),
        "controller_rss_before_mb": round(before, 1),
        "controller_rss_after_mb": round(after, 1),
        "kept_bytes": retention.get("kept_bytes", "(not reported: before the fix)"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--ignored-mib", type=float, default=8.0)
    args = parser.parse_args()
    figures = anyio.run(measure, args.calls, args.ignored_mib, PIN_EVERY_WAIT)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
