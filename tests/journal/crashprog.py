"""Crash-test program and its process protocol (run as a script by test_crash.py).

``python crashprog.py zygote`` imports everything once, then reads one JSON command per line
on stdin and runs each in a freshly forked child (single-threaded parent: fork is safe), so a
command costs a fork instead of a Python start. It answers one JSON line per command:
``{"rc": <exit code, -9 when SIGKILLed>}``; the child writes its own answer to ``out``.

Commands: ``run`` (run the program holding its lease, maybe SIGKILL itself at a checkpoint or
after a delay), ``dump`` (the journal's rows and lease of a program; with ``break_lease`` it
first breaks the lease a killed run left behind, as an operator would), ``resolve`` (settle an
unknown outcome by hand).

The program: six steps of thread ``main``, each side effect writing one row into a separate
SQLite *target* database (the outside world), with no unique constraint, so a duplicated
effect shows up as two rows with the same key::

    s0 reserve  side effect, reconcile hook (looks the key up in the target)
    s1 planner  kind="llm", read-only (counted in the target's llm_calls, not an effect)
    s2 charge   side effect, no hook, not idempotent -> UnknownOutcome after a crash
    s3 notify   side effect, idempotent (the target deduplicates on the key)
    s4 ship     side effect, reconcile hook; arguments built from s0 and s2 results
    s5 audit    side effect, no hook, not idempotent; arguments hold every earlier result

Later arguments depend on earlier results, so a replay that returned a different result
would raise NonDeterminismError.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentrt.errors import UnknownOutcome
from agentrt.journal import Journal, ReconcileResult, StepSpec

STEPS = ("reserve", "planner", "charge", "notify", "ship", "audit")
HOOKED = {0, 4}
IDEMPOTENT = {3}


class Checkpoints:
    """Counts instrumented points; SIGKILLs the process at point number ``kill_at``."""

    def __init__(self, kill_at: int, events_path: Path) -> None:
        self.kill_at = kill_at
        self.count = 0
        self.events = events_path.open("a", buffering=1)

    def hit(self, name: str) -> None:
        self.count += 1
        self.events.write(f"{self.count} {name}\n")  # in the page cache: survives SIGKILL
        if self.count == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def note(self, text: str) -> None:
        self.events.write(f"- {text}\n")


def target_connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS effects (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "key TEXT NOT NULL, tool TEXT NOT NULL, program TEXT NOT NULL)"
    )
    db.execute("CREATE TABLE IF NOT EXISTS llm_calls (key TEXT NOT NULL)")
    return db


def instrument(journal: Journal, points: Checkpoints) -> None:
    """Checkpoints around every durable journal write (before / after it commits)."""
    store = journal.store
    for op in ("insert_step", "update_step", "upsert_step"):
        original = getattr(store, op)

        def wrapped(*args: Any, _op: str = op, _orig: Any = original, **kw: Any) -> Any:
            position = kw.get("position", args[0] if args else None)
            seq = position.seq if hasattr(position, "seq") else args[0].position.seq

            async def run() -> Any:
                points.hit(f"s{seq}:{_op}:before")
                result = await _orig(*args, **kw)
                points.hit(f"s{seq}:{_op}:after")
                return result

            return run()

        setattr(store, op, wrapped)


def open_witness(path: Path) -> Any:
    """Where a run writes each result it got back (the harness compares them later)."""
    return path.open("a", buffering=1)


async def run_program(cmd: dict[str, Any]) -> dict[str, Any]:
    points = Checkpoints(int(cmd.get("kill_at", 0)), Path(cmd["events"]))
    target = target_connect(cmd["target"])
    program = cmd["program"]
    reconciled: list[list[Any]] = []
    reran: list[str] = []

    def effect(seq: int, name: str) -> Callable[[str], Awaitable[dict[str, Any]]]:
        async def execute(key: str) -> dict[str, Any]:
            if seq in IDEMPOTENT:
                row = target.execute("SELECT id FROM effects WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    reran.append(key)
            points.hit(f"s{seq}:effect:before-write")
            if seq in IDEMPOTENT:  # a provider that deduplicates on the key
                target.execute(
                    "INSERT INTO effects (key, tool, program) SELECT ?, ?, ? WHERE NOT EXISTS "
                    "(SELECT 1 FROM effects WHERE key = ?)",
                    (key, name, program, key),
                )
                (effect_id,) = target.execute(
                    "SELECT id FROM effects WHERE key = ?", (key,)
                ).fetchone()
            else:
                cur = target.execute(
                    "INSERT INTO effects (key, tool, program) VALUES (?, ?, ?)",
                    (key, name, program),
                )
                effect_id = cur.lastrowid
            points.hit(f"s{seq}:effect:after-write")
            return {"effect_id": effect_id, "tool": name}

        return execute

    def reconcile(seq: int, name: str) -> Callable[[str], Awaitable[ReconcileResult]]:
        async def hook(key: str) -> ReconcileResult:
            points.hit(f"s{seq}:reconcile")
            row = target.execute("SELECT id FROM effects WHERE key = ?", (key,)).fetchone()
            outcome = (
                ReconcileResult("not_done")
                if row is None
                else ReconcileResult("done", {"effect_id": row[0], "tool": name})
            )
            reconciled.append([key, outcome.status])
            return outcome

        return hook

    async def llm(key: str) -> dict[str, Any]:
        points.hit("s1:llm:call")
        target.execute("INSERT INTO llm_calls (key) VALUES (?)", (key,))
        return {"plan": f"ship {program}"}

    journal = Journal(cmd["url"], schema=cmd.get("schema"))
    await journal.connect()
    instrument(journal, points)
    await journal.acquire_lease(program)  # the harness broke the lease of a killed run
    if cmd.get("kill_after_s"):
        threading.Timer(float(cmd["kill_after_s"]), os.kill, (os.getpid(), signal.SIGKILL)).start()
    results: list[Any] = []
    witness = open_witness(Path(cmd["witness"]))
    try:
        for seq, name in enumerate(STEPS):
            args: dict[str, Any] = {"program": program, "step": name}
            if seq == 4:
                args["after"] = [results[0]["effect_id"], results[2]["effect_id"]]
            if seq == 5:
                args["all"] = results
            points.hit(f"s{seq}:step:begin")
            if name == "planner":
                spec = StepSpec(program, "main", seq, "llm", name, args)
                result = await journal.run_step(spec, llm)
            else:
                spec = StepSpec(
                    program,
                    "main",
                    seq,
                    "tool",
                    name,
                    args,
                    side_effect=True,
                    idempotent=seq in IDEMPOTENT,
                )
                hook = reconcile(seq, name) if seq in HOOKED else None
                result = await journal.run_step(spec, effect(seq, name), reconcile=hook)
            witness.write(json.dumps({"seq": seq, "result": result}) + "\n")
            results.append(result)
    except UnknownOutcome as exc:
        return {"status": "unknown", "key": exc.key, "reconciled": reconciled, "reran": reran}
    finally:
        witness.close()
        await journal.release_lease(program)
        await journal.close()
        target.close()
    return {"status": "completed", "results": results, "reconciled": reconciled, "reran": reran}


async def dump(cmd: dict[str, Any]) -> dict[str, Any]:
    async with Journal(cmd["url"], schema=cmd.get("schema")) as journal:
        if cmd.get("break_lease"):
            await journal.break_lease(cmd["program"])
        rows = await journal.program_steps(cmd["program"])
        leases = await journal.leases([cmd["program"]])
    return {
        "lease_epoch": leases[0].epoch if leases else 0,
        "steps": [
            {
                "seq": r.position.seq,
                "key": r.key,
                "status": r.status.value,
                "attempts": r.attempts,
                "result": r.result,
                "side_effect": r.side_effect,
            }
            for r in rows
        ],
    }


async def resolve(cmd: dict[str, Any]) -> dict[str, Any]:
    async with Journal(cmd["url"], schema=cmd.get("schema")) as journal:
        record = await journal.resolve_unknown(
            cmd["key"], happened=cmd["happened"], result=cmd.get("result")
        )
    return {"status": record.status.value}


COMMANDS = {"run": run_program, "dump": dump, "resolve": resolve}


def child(cmd: dict[str, Any]) -> int:
    try:
        answer = asyncio.run(COMMANDS[cmd["op"]](cmd))
    except BaseException as exc:  # report anything unexpected to the harness
        answer = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
    # written whole or not at all: a timer kill may land while the answer is being written
    out = Path(cmd["out"])
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(answer))
    partial.replace(out)
    return 0 if answer.get("status") != "error" else 1


def warm_up(url: str, schema: str | None) -> None:
    """Open the journal once before forking, so that each child skips SQLAlchemy's one-time
    set-up work. It leaves no thread behind (checked): forking stays safe."""

    async def once() -> None:
        async with Journal(url, schema=schema) as journal:
            await journal.program_steps("warm-up")

    asyncio.run(once())
    for thread in threading.enumerate():  # the database threads end shortly after closing
        if thread is not threading.main_thread():
            thread.join(timeout=10)
    if threading.active_count() != 1:
        raise RuntimeError("the warm-up left threads running: forking would be unsafe")


def zygote() -> None:
    warm = json.loads(sys.stdin.readline())
    warm_up(warm["url"], warm.get("schema"))
    sys.stdout.write('{"ready": true}\n')
    sys.stdout.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = child(cmd)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["zygote"]:
        zygote()
    else:
        print(json.dumps(asyncio.run(COMMANDS[sys.argv[1]](json.loads(sys.argv[2])))))
