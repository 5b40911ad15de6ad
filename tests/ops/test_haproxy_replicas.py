"""Controller replicas behind the shipped HAProxy config, sharded by program (docs/replicas.md).

Debian's ``haproxy`` runs on loopback with ``deploy/haproxy/haproxy.cfg`` as shipped, only its
``bind`` address and ``server`` lines replaced by the test's ports, in front of three
``agentrt controller serve`` subprocesses that share two emulator subprocesses:

* every call and program event of a program reaches one replica (each replica's
  ``GET /agentrt/v1/programs`` is checked), different programs spread over the replicas, and
  untagged calls naming a session by header stick to one replica;
* one replica is SIGKILLed with calls queued on it and streams running through it: the
  queued calls (no byte of their answer sent) are retried by HAProxy on the others and
  finish; the streams it was serving end for their clients, who retry them; every program
  finishes, and the dead replica's programs continue, from zero attained service, on the
  others;
* a replica that hangs (SIGSTOP) fails its checks and leaves the ring; its programs' next
  calls are served by the others.

Skipped without ``haproxy`` on the ``PATH``, unless ``AGENTRT_REQUIRE_HAPROXY=1`` (``.ci/run``
installs the package and sets it): then it fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
from anyio.abc import Process

import agentrt
from agentrt import Runtime, RuntimeConfig
from agentrt_emulator.server import DEFAULT_MODEL_NAME
from tests.backends.servers import spawn_emulator
from tests.ops.processes import controller_process, free_port, reap

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
PROGRAMS = "/agentrt/v1/programs"
_SECTION_LINE = re.compile(r"^(frontend|backend|listen|defaults|global)\b\s*(\S*)")
_SERVER_LINE = re.compile(r"^(\s*)server\s+(\S+)\s+\S+(.*)$")
_BIND_LINE = re.compile(r"^(\s*)bind\s+\S+(.*)$")
#: The shipped frontends: the balancer and HAProxy's stats page.
FRONTEND, STATS = "agentrt", "stats"


def haproxy_binary() -> str:
    """Debian's ``haproxy``, or skip (fail under ``AGENTRT_REQUIRE_HAPROXY=1``)."""
    binary = shutil.which("haproxy") or next(
        (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if os.access(p, os.X_OK)),
        None,
    )
    if binary:
        return binary
    if os.environ.get("AGENTRT_REQUIRE_HAPROXY") == "1":
        pytest.fail("AGENTRT_REQUIRE_HAPROXY=1 but haproxy is not installed")
    pytest.skip("no haproxy: apt-get install haproxy (.ci/run does)")


def haproxy_config(shipped: str, binds: dict[str, str], replicas: Sequence[str]) -> str:
    """The shipped config with each frontend's ``bind`` address set from ``binds`` (frontend
    name to ``host:port``) and its ``server`` lines replaced by one per replica
    (``host:port``), each with the options of the shipped first server line. Every other
    line is the shipped one."""
    out: list[str] = []
    section = ""
    servers_written = False
    bound: set[str] = set()
    for line in shipped.splitlines():
        if header := _SECTION_LINE.match(line):
            section = header.group(2)
        if bind := _BIND_LINE.match(line):
            out.append(f"{bind.group(1)}bind {binds[section]}{bind.group(2)}")
            bound.add(section)
        elif server := _SERVER_LINE.match(line):
            if not servers_written:
                indent, options = server.group(1), server.group(3)
                out += [f"{indent}server replica{i + 1} {address}{options}"
                        for i, address in enumerate(replicas)]  # fmt: skip
                servers_written = True
        else:
            out.append(line)
    assert bound == set(binds) and servers_written, "the shipped HAProxy config changed shape"
    return "\n".join(out) + "\n"


def replica_status(stats_csv: str) -> dict[str, str]:
    """HAProxy's status of each replica (``UP``, ``DOWN``, ...), by server name, from its
    stats page as CSV (``/stats;csv``)."""
    rows = stats_csv.splitlines()
    columns = rows[0].removeprefix("# ").split(",")
    status: dict[str, str] = {}
    for row in rows[1:]:
        values = dict(zip(columns, row.split(","), strict=False))
        if values.get("pxname") == "agentrt_controllers" and values["svname"] not in (
            "FRONTEND",
            "BACKEND",
        ):
            status[values["svname"]] = values["status"]
    return status


def all_up(status: Mapping[str, str], count: int) -> bool:
    """Whether HAProxy's ``status`` (:func:`replica_status`) lists ``count`` replicas, all
    ``UP``."""
    return len(status) == count and set(status.values()) == {"UP"}


@dataclass
class Balancer:
    """A running HAProxy: its URL, its stats page's URL and its log (stdout and stderr)."""

    url: str
    stats_url: str
    log: Path

    async def servers(self) -> dict[str, str]:
        """HAProxy's status of each replica (``UP``, ``DOWN``, ...), by server name."""
        async with httpx.AsyncClient(timeout=5) as http:
            answer = await http.get(self.stats_url + "/stats;csv")
        return replica_status(answer.text)


@contextlib.asynccontextmanager
async def haproxy(replicas: Sequence[str], workdir: Path) -> AsyncIterator[Balancer]:
    """HAProxy with the shipped config in front of ``replicas`` (``http://host:port`` each);
    yields once it sees every replica UP (its ``/readyz`` check passed). Killed on exit."""
    binary = haproxy_binary()
    port, stats_port = free_port(), free_port()
    addresses = [r.removeprefix("http://") for r in replicas]
    binds = {FRONTEND: f"127.0.0.1:{port}", STATS: f"127.0.0.1:{stats_port}"}
    config = workdir / "haproxy.cfg"
    config.write_text(haproxy_config(HAPROXY_CONFIG.read_text(), binds, addresses))
    log = workdir / "haproxy.log"
    checked = await anyio.run_process([binary, "-c", "-q", "-f", str(config)], check=False)
    assert checked.returncode == 0, checked.stderr.decode(errors="replace")
    with log.open("wb") as sink:
        process = await anyio.open_process(
            [binary, "-db", "-f", str(config)], stdout=sink, stderr=sink
        )
    balancer = Balancer(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{stats_port}", log)
    try:
        with anyio.fail_after(20):
            while True:
                assert process.returncode is None, log.read_text(errors="replace")
                with contextlib.suppress(httpx.HTTPError):
                    status = await balancer.servers()
                    if all_up(status, len(replicas)):
                        break
                await anyio.sleep(0.1)
        yield balancer
    finally:
        await reap(process)


def tags(program_id: str, session_id: str) -> dict[str, str]:
    return {"X-Agentrt-Program-Id": program_id, "X-Agentrt-Session-Id": session_id}


def chat(tokens: int, stream: bool = False) -> dict[str, Any]:
    return {"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": tokens, "ignore_eos": True, "stream": stream}  # fmt: skip


@dataclass
class Replicas:
    """Controller subprocesses and their URLs, in HAProxy's server order."""

    processes: list[Process]
    urls: list[str]


@contextlib.asynccontextmanager
async def replicas(count: int, backends: Sequence[str], *options: str) -> AsyncIterator[Replicas]:
    """``count`` controller subprocesses in front of ``backends`` (started concurrently: each
    takes seconds to import on a busy machine), probing their backends every second (the
    default): a replica whose probes all time out answers ``/readyz`` 503 and HAProxy moves
    its programs, which a 0.2 s probe on a loaded test machine would do at random."""
    async with contextlib.AsyncExitStack() as stack:
        started: dict[int, tuple[Process, str]] = {}

        async def start(index: int) -> None:
            started[index] = await stack.enter_async_context(
                controller_process(list(backends), "--scrape-interval-s", "1", *options)
            )

        async with anyio.create_task_group() as group:
            for index in range(count):
                group.start_soon(start, index)
        ordered = [started[i] for i in range(count)]
        yield Replicas([p for p, _ in ordered], [u for _, u in ordered])


@contextlib.asynccontextmanager
async def balanced_fleet(workdir: Path, *options: str) -> AsyncIterator[tuple[Replicas, Balancer]]:
    """Two emulator subprocesses, three controller replicas in front of both (``options``
    passed to each) and HAProxy in front of the replicas (its files in ``workdir``); skips (or
    fails) before starting anything when HAProxy is missing."""
    haproxy_binary()
    async with (
        spawn_emulator() as first,
        spawn_emulator() as second,
        replicas(3, [first.url, second.url], *options) as fleet,
        haproxy(fleet.urls, workdir) as balancer,
    ):
        yield fleet, balancer


async def entries(http: httpx.AsyncClient, replica: str) -> dict[str, dict[str, Any]]:
    """``replica``'s process table: its entries by program id."""
    answer = await http.get(replica + PROGRAMS)
    assert answer.status_code == 200, answer.text
    return {entry["program_id"]: entry for entry in answer.json()["entries"]}


def event_path(program_id: str, event: str) -> str:
    """A program event's path, its id percent-encoded as the SDK sends it (dots too)."""
    return f"{PROGRAMS}/{quote(program_id, safe='').replace('.', '%2E')}/{event}"


async def test_haproxy_keeps_every_call_of_a_program_on_one_replica(tmp_path: Path) -> None:
    programs = [f"p-{i:02d}" for i in range(24)] + ["team/a.b:7"]
    sessions = [f"chat-{i}" for i in range(9)]
    calls_per_program = 3
    async with (
        balanced_fleet(tmp_path) as (fleet, balancer),
        httpx.AsyncClient(timeout=30) as http,
    ):

        async def program(program_id: str) -> None:
            # The start event names the program by its path only; the calls by header.
            started = await http.post(
                balancer.url + event_path(program_id, "start"),
                json={"session_id": "s-1", "name": "react"},
            )
            assert started.status_code == 200, started.text
            for _ in range(calls_per_program):
                answer = await http.post(
                    balancer.url + "/v1/chat/completions",
                    json=chat(4),
                    headers=tags(program_id, "s-1"),
                )
                assert answer.status_code == 200, answer.text

        async def foreign_session(session: str) -> None:
            for _ in range(calls_per_program):  # no agentrt tags: a session header only
                answer = await http.post(
                    balancer.url + "/v1/chat/completions",
                    json=chat(4),
                    headers={"x-session-id": session},
                )
                assert answer.status_code == 200, answer.text

        async with anyio.create_task_group() as group:
            for program_id in programs:
                group.start_soon(program, program_id)
            for session in sessions:
                group.start_soon(foreign_session, session)
        tables = [await entries(http, url) for url in fleet.urls]
        # The SDK itself: its calls carry the header, its events (start, tool wait, end) name
        # the program in their path only; all must meet one entry.
        sdk_homes: dict[str, list[dict[str, Any]]] = {}
        config = RuntimeConfig(
            base_url=balancer.url + "/v1", model=DEFAULT_MODEL_NAME, controller="required"
        )
        async with Runtime(config) as rt:

            async def sdk_program(program_id: str) -> None:
                async with rt.program("sdk", program_id=program_id):
                    await agentrt.chat([{"role": "user", "content": "hi"}], max_tokens=4)
                    async with agentrt.wait("lookup", kind="tool", predicted_s=0.2):
                        await anyio.sleep(0.2)
                    await agentrt.chat([{"role": "user", "content": "again"}], max_tokens=4)
                    sdk_homes[program_id] = [
                        entry
                        for url in fleet.urls
                        if (entry := (await entries(http, url)).get(program_id)) is not None
                    ]

            async with anyio.create_task_group() as group:
                for i in range(6):
                    group.start_soon(sdk_program, f"sdk-{i}.x")
            link = rt.link.stats
    # Required mode raises on a refused event; every event of the six programs went out.
    assert link.events_failed == 0 and link.events_skipped == 0
    assert link.events_sent >= 6 * 4  # start, tool-start, tool-end, end
    for program_id, homes in sdk_homes.items():
        assert len(homes) == 1, f"{program_id} is on {len(homes)} replicas"
        assert homes[0]["name"] == "sdk"  # the start event (by path) met the calls' entry
        assert homes[0]["calls_finished"] == 2
        assert homes[0]["tool_wait_s"] > 0  # so did the tool wait's events
    assert len(sdk_homes) == 6
    for program_id in programs:
        homes = [t[program_id] for t in tables if program_id in t]
        assert len(homes) == 1, f"{program_id} is on {len(homes)} replicas"
        # The event (by path) and the calls (by header) met the same entry.
        assert homes[0]["name"] == "react"
        assert homes[0]["calls_finished"] == calls_per_program
    for session in sessions:
        homes = [t[f"{session}:lead"] for t in tables if f"{session}:lead" in t]
        assert len(homes) == 1, f"session {session} is on {len(homes)} replicas"
        assert homes[0]["calls_finished"] == calls_per_program
    # Spread: HAProxy's ring is deterministic for these ids and server names.
    assert all(set(t) & set(programs) for t in tables), [sorted(t) for t in tables]


@dataclass
class Outcomes:
    """What the clients saw in the kill test."""

    #: Calls that finished with ``[DONE]``, per program.
    finished: dict[str, int]
    #: Streams cut after their answer started (the client retried them).
    cut: list[str]
    #: Answers other than 200 (a call the balancer could not place).
    refused: list[int]


async def test_a_sigkilled_replica_s_programs_continue_on_the_others(tmp_path: Path) -> None:
    steps, tokens = 5, 40
    programs = [f"k-{i:02d}" for i in range(18)]
    outcomes = Outcomes({p: 0 for p in programs}, [], [])
    # A window of one call per backend: each replica streams at most two calls and queues the
    # rest, so the victim holds calls that have not started when it dies.
    async with (
        balanced_fleet(tmp_path, "--admission-window", "1") as (fleet, balancer),
        httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as http,
    ):
        victim, victim_url = fleet.processes[0], fleet.urls[0]

        async def streamed(program_id: str, attempt: int) -> bool:
            """One streamed call; whether it ended with [DONE] (False: cut mid-stream)."""
            headers = {**tags(program_id, "s-kill"), "X-Agentrt-Attempt": str(attempt)}
            request = chat(tokens, stream=True)
            try:
                async with http.stream(
                    "POST", balancer.url + "/v1/chat/completions", json=request, headers=headers
                ) as answer:
                    if answer.status_code != 200:
                        outcomes.refused.append(answer.status_code)
                        raise AssertionError(f"{program_id}: {answer.status_code}")
                    async for line in answer.aiter_lines():
                        if line == "data: [DONE]":
                            return True
                        if line.startswith("data: "):
                            event = json.loads(line[6:])
                            if "error" in event:  # the controller reporting a cut upstream
                                return False
            except httpx.RemoteProtocolError:  # the balancer cut the stream: replica gone
                return False
            return False

        async def program(program_id: str) -> None:
            for _ in range(steps):
                for attempt in (1, 2, 3):
                    if await streamed(program_id, attempt):
                        outcomes.finished[program_id] += 1
                        break
                    outcomes.cut.append(program_id)
                else:
                    raise AssertionError(f"{program_id}: a call failed three times")

        async with anyio.create_task_group() as group:
            for program_id in programs:
                group.start_soon(program, program_id)
            # Kill the victim while it streams some calls and queues others, once every
            # program has reached its replica (an entry is made when a call arrives), so that
            # the victim's table names all of its programs.
            with anyio.fail_after(30):
                while True:
                    queues = (await http.get(victim_url + "/agentrt/v1/queues")).json()
                    flowing = any(b["in_flight"] for b in queues["backends"])
                    if queues["queued"] >= 1 and flowing:
                        homes = [await entries(http, url) for url in fleet.urls]
                        if set().union(*homes) >= set(programs):
                            break
                    await anyio.sleep(0.02)
            before = await entries(http, victim_url)
            victim.kill()
            killed = {p for p in before if outcomes.finished[p] < steps}
        with anyio.fail_after(10):
            while not (await balancer.servers())["replica1"].startswith("DOWN"):  # noqa: ASYNC110
                await anyio.sleep(0.1)
        # Once HAProxy took the victim out, each moved program has one home: two more calls
        # of each land on one survivor.
        moved_before = [await entries(http, url) for url in fleet.urls[1:]]
        for program_id in sorted(killed):
            for _ in range(2):
                assert await streamed(program_id, 1)
        after = [await entries(http, url) for url in fleet.urls[1:]]
    assert outcomes.refused == []  # every call not yet streaming was placed elsewhere
    assert outcomes.finished == {p: steps for p in programs}  # none lost
    # Only streams the victim was serving were cut: one per backend at most (the window).
    assert len(outcomes.cut) <= 2, outcomes.cut
    assert queues["queued"] >= 1  # ... while it held queued calls: HAProxy retried those
    assert killed, "the victim had no unfinished program when it died"
    for program_id in killed:
        grew = [
            after[i][program_id]["calls_finished"]
            - moved_before[i].get(program_id, {}).get("calls_finished", 0)
            for i in range(len(after))
            if program_id in after[i]
        ]
        assert sorted(grew)[-1:] == [2] and sum(grew) == 2, (program_id, grew)
        # What a move loses: the new entries start from zero; the calls the victim finished
        # (and their attained service) are counted nowhere else.
        on_survivors = sum(t[program_id]["calls_finished"] for t in after if program_id in t)
        assert on_survivors <= steps + 2 - before[program_id]["calls_finished"]
    untouched = set(programs) - set(before)  # on a survivor from their first call
    for program_id in untouched:
        homes = [t[program_id] for t in after if program_id in t]
        assert len(homes) == 1 and homes[0]["calls_finished"] == steps


async def test_a_stopped_replica_leaves_the_ring_and_its_programs_move(tmp_path: Path) -> None:
    """A replica that hangs (SIGSTOP) fails its checks (``timeout check``) and leaves the
    ring; its programs' next calls are served by the others. (Calls it held when it stopped
    wait for it — docs/replicas.md, "When a replica dies".)"""
    programs = [f"s-{i:02d}" for i in range(12)]
    async with (
        balanced_fleet(tmp_path) as (fleet, balancer),
        httpx.AsyncClient(timeout=30) as http,
    ):

        async def call(program_id: str) -> None:
            answer = await http.post(
                balancer.url + "/v1/chat/completions", json=chat(4), headers=tags(program_id, "s")
            )
            assert answer.status_code == 200, answer.text

        for program_id in programs:
            await call(program_id)
        stopped = set(await entries(http, fleet.urls[0]))
        assert stopped, "no program hashed to the replica about to stop"
        fleet.processes[0].send_signal(signal.SIGSTOP)
        try:
            with anyio.fail_after(20):
                while not (await balancer.servers())["replica1"].startswith("DOWN"):  # noqa: ASYNC110
                    await anyio.sleep(0.2)
            for program_id in programs:
                await call(program_id)
            after = [await entries(http, url) for url in fleet.urls[1:]]
        finally:
            fleet.processes[0].send_signal(signal.SIGCONT)
    for program_id in stopped:
        homes = [t[program_id] for t in after if program_id in t]
        assert len(homes) == 1 and homes[0]["calls_finished"] == 1, (program_id, homes)
