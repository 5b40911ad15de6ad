"""The retention fast lane cannot starve another tenant (docs/security.md, "The retention fast
lane"; docs/tenancy.md, "The retained lane"), over real HTTP: an emulator with a small batch
at a high time scale, a default controller with two tenants' keys.

The hostile tenant runs many clients, each doing call → ``tool-start`` (predicted 5 s) → call
→ ...: every call after the first comes back inside a retention window and enters the
retained lane. The victim tenant runs one 15-call program. Before the lane moved inside the
fair shares, lane calls overtook every other tenant's calls and were never charged to their
tenant's share: here the victim's program (4.3 s alone) had done 3 of its 15 calls after
40 s, and the hostile tenant's share was charged for its 16 first calls only (issue 24's
probe: 256 s against 0.31 s). Now the victim stays within 2x of its time alone (1.6-1.8x
measured on a loaded machine), and every hostile call is charged.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import httpx
import pytest

from agentrt.protocol import EVENTS_PREFIX, CallTags
from agentrt_emulator.core.types import EngineConfig

from .stack import MODEL, Stack, threaded_stack

pytestmark = pytest.mark.timeout(120)

ADMIN = {"authorization": "Bearer admin-token-0003"}
VICTIM = {"authorization": "Bearer key-victim-0001"}
HOSTILE = {"authorization": "Bearer key-hostile-0002"}
KEYS = "victim=key-victim-0001,hostile=key-hostile-0002"

#: The engine's batch (most calls it runs at once).
SLOTS = 8
#: Model seconds per wall second: one call takes ~240 ms of wall time, long enough that the
#: test's own HTTP traffic (two requests per hostile call, all in this process) does not
#: dominate what is measured.
TIME_SCALE = 1.0
#: Hostile clients (four times the batch: the lane is never empty on the old controller).
HOSTILE_CLIENTS = 16
#: Calls of the victim's program, run one after the other.
VICTIM_CALLS = 15
#: Output tokens per victim call (``ignore_eos``: exactly this many); the hostile calls have
#: 8 to 40 (mean 24), varied so the batch does not run in lockstep.
OUTPUT_TOKENS = 32
#: The victim's program under attack must finish within this many times its time alone.
BOUND = 2.0
#: Give up on a starved victim after this long (seconds): the figure is then "more than".
VICTIM_LIMIT_S = 40.0


def _body(text: str, output_tokens: int = OUTPUT_TOKENS) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": output_tokens,
        "ignore_eos": True,
    }


def _tags(program: str, node: str) -> dict[str, str]:
    return CallTags(session_id="s", program_id=program, thread_id="main", node_id=node).to_headers()


@contextlib.contextmanager
def _stack() -> Iterator[Stack]:
    engine = EngineConfig(num_gpu_blocks=4096, max_num_seqs=SLOTS)
    with threaded_stack(
        {"time_scale": TIME_SCALE, "engine": engine}, api_keys=KEYS, admin_token="admin-token-0003"
    ) as stack:
        yield stack


async def _victim_program(
    http: httpx.AsyncClient, url: str, program: str, calls: int = VICTIM_CALLS
) -> float:
    """Run the victim's program (``calls`` calls); its end-to-end time (seconds)."""
    started = anyio.current_time()
    for index in range(calls):
        text = f"victim {program} step {index} " + "context " * 60
        answer = await http.post(
            url + "/v1/chat/completions",
            json=_body(text),
            headers={**VICTIM, **_tags(program, f"v{index}")},
        )
        assert answer.status_code == 200, answer.text
    return anyio.current_time() - started


async def _hostile_client(
    http: httpx.AsyncClient,
    url: str,
    index: int,
    stop: anyio.Event,
    calls: list[int],
    under_way: anyio.Event,
) -> None:
    """call → tool-start → call → ... until ``stop``; ``calls[0]`` counts the answered calls
    of all clients, ``under_way`` is set once they are three per client."""
    program = f"hostile-{index}"
    step = 0
    while not stop.is_set():
        text = f"hostile {index} step {step} " + "context " * 60
        output_tokens = 8 + (7 * step + 13 * index) % 33
        answer = await http.post(
            url + "/v1/chat/completions",
            json=_body(text, output_tokens),
            headers={**HOSTILE, **_tags(program, f"c{step}")},
        )
        assert answer.status_code == 200, answer.text
        calls[0] += 1
        if calls[0] >= 3 * HOSTILE_CLIENTS:
            under_way.set()
        wait = {
            "session_id": "s",
            "thread_id": "main",
            "node_id": f"t{step}",
            "tool_name": "search",
            "predicted_duration_s": 5.0,
        }
        event = f"{url}{EVENTS_PREFIX}/programs/{program}/tool-start"
        assert (await http.post(event, json=wait, headers=HOSTILE)).status_code == 200
        step += 1


@dataclass
class Figures:
    """What one run measured."""

    #: The victim's program alone, after a short warm-up program (seconds).
    alone_s: float
    #: The victim's program under attack (seconds; ``VICTIM_LIMIT_S`` = starved, gave up).
    attacked_s: float
    #: Hostile calls answered during the attack, and how many entered the retained lane.
    hostile_calls: int
    retained_calls: int
    #: Service charged to each tenant's fair share (seconds) and its finished calls.
    charged_s: dict[str, float]
    finished_calls: dict[str, int]


async def _measure(url: str) -> Figures:
    limits = httpx.Limits(max_connections=HOSTILE_CLIENTS + 4)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:
        await _victim_program(http, url, "warm-up", calls=3)
        alone = await _victim_program(http, url, "alone")
        stop, under_way, calls = anyio.Event(), anyio.Event(), [0]
        attacked = VICTIM_LIMIT_S
        async with anyio.create_task_group() as group:
            for index in range(HOSTILE_CLIENTS):
                group.start_soon(_hostile_client, http, url, index, stop, calls, under_way)
            await under_way.wait()  # the clients are past their first calls: in the lane
            with anyio.move_on_after(VICTIM_LIMIT_S):
                attacked = await _victim_program(http, url, "attacked")
            stop.set()
        queues = (await http.get(url + EVENTS_PREFIX + "/queues", headers=ADMIN)).json()
    tenants = queues["tenancy"]["tenants"] if "tenancy" in queues else []
    return Figures(
        alone_s=alone,
        attacked_s=attacked,
        hostile_calls=calls[0],
        retained_calls=int(queues["retained_lane"]["total"]),
        charged_s={t["tenant"]: float(t["charged_service_s"]) for t in tenants},
        finished_calls={t["tenant"]: int(t["finished_calls"]) for t in tenants},
    )


#: Runs of the whole measurement at most: a time ratio on a machine shared with other work
#: can be pushed past the bound by a burst of load there; a second run on a fresh stack tells
#: such a burst (one run over, the other far under) from starvation (every run over: on the
#: old controller the victim had not finished after 40 s, 10x and more).
ATTEMPTS = 2


def test_the_retention_lane_cannot_starve_another_tenant() -> None:
    runs: list[Figures] = []
    for _ in range(ATTEMPTS):
        with _stack() as stack:
            figures = anyio.run(_measure, stack.controller_url)
        runs.append(figures)
        print(f"\nretention lane under attack: {figures}")  # the figures docs/security.md quotes
        # The attack did go through the lane (otherwise this test would prove nothing)...
        assert figures.retained_calls >= figures.hostile_calls // 2, figures
        # ... its calls were charged to the hostile tenant like ordinary ones (a retained call
        # reads a cached prompt, so a little less; never nothing) ...
        hostile_per_call = figures.charged_s["hostile"] / figures.finished_calls["hostile"]
        victim_per_call = figures.charged_s["victim"] / figures.finished_calls["victim"]
        assert hostile_per_call >= 0.5 * victim_per_call, figures
        # ... and the victim kept its share.
        if figures.attacked_s <= BOUND * figures.alone_s:
            return
    raise AssertionError(f"the victim took more than {BOUND}x its time alone in every run: {runs}")


async def _retained_after_each_wait(url: str) -> list[bool]:
    """One program: wait before any call, call, wait, call, the same node again, a new node;
    whether the program is retained after each wait."""
    retained: list[bool] = []
    async with httpx.AsyncClient(timeout=30) as http:
        events = f"{url}{EVENTS_PREFIX}/programs/agent"

        async def call(node: str) -> None:
            answer = await http.post(
                url + "/v1/chat/completions",
                json=_body("victim agent " + "context " * 60),
                headers={**VICTIM, **_tags("agent", node)},
            )
            assert answer.status_code == 200, answer.text

        async def wait(node: str) -> None:
            body = {"session_id": "s", "thread_id": "main", "node_id": node, "tool_name": "search"}
            answer = await http.post(events + "/tool-start", json=body, headers=VICTIM)
            assert answer.status_code == 200, answer.text
            listing = await http.get(url + EVENTS_PREFIX + "/programs", headers=VICTIM)
            (entry,) = [e for e in listing.json()["entries"] if e["program_id"] == "agent"]
            retained.append(entry["retained_until_at"] is not None)

        started = await http.post(events + "/start", json={"session_id": "s"}, headers=VICTIM)
        assert started.status_code == 200, started.text
        await wait("t0")  # no call finished yet
        await call("c1")
        await wait("t1")
        await call("c2")  # admitted: the retention of t1 has done its job
        await wait("t1")  # the same node again
        await wait("t2")  # a new node after c2: honoured
    return retained


def test_a_wait_retains_only_after_a_finished_call_and_once_per_node() -> None:
    with _stack() as stack:
        retained = anyio.run(_retained_after_each_wait, stack.controller_url)
    assert retained == [False, True, False, True]
