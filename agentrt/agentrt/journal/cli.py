"""``agentrt journal``: inspect and maintain the intent journal.

::

    agentrt journal list    [--url URL] [--status STATUS] [--limit N] [--json]
    agentrt journal show    PROGRAM_ID [--url URL] [--results] [--json]
    agentrt journal purge   [--older-than 7d] [--status S ...] [--program ID ...] [--dry-run]
    agentrt journal resolve KEY (--done [--result JSON] | --not-done)
    agentrt journal durations TOOL
    agentrt journal release-lease PROGRAM_ID --yes   # break a program's lease (holder dead)

``list`` and ``show`` print each program's lease (holder, epoch, expiry). ``--url`` defaults
to ``$AGENTRT_JOURNAL_URL``, else ``./.agentrt/journal.sqlite``. Step results can hold user
data: ``show`` prints them only with ``--results``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from agentrt.journal.journal import Journal
    from agentrt.journal.leases import LeaseRecord

__all__ = ["parse_duration_s", "register"]

#: ``agentrt journal --help``'s text: plain text for a terminal (the module docstring is
#: reStructuredText for the API docs).
_DESCRIPTION = """\
Inspect and maintain the intent journal (the record of side-effecting tool steps).

  agentrt journal list    [--url URL] [--status STATUS] [--limit N] [--json]
  agentrt journal show    PROGRAM_ID [--url URL] [--results] [--json]
  agentrt journal purge   [--older-than 7d] [--status S ...] [--program ID ...] [--dry-run]
  agentrt journal resolve KEY (--done [--result JSON] | --not-done)
  agentrt journal durations TOOL
  agentrt journal release-lease PROGRAM_ID --yes   # break a program's lease (holder dead)

list and show print each program's lease (holder, epoch, expiry). --url defaults to
$AGENTRT_JOURNAL_URL, else ./.agentrt/journal.sqlite. Step results can hold user data: show
prints them only with --results."""

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_STATUSES = ("STARTED", "COMMITTED", "FAILED")


def parse_duration_s(text: str) -> float:
    """``"90"``, ``"90s"``, ``"15m"``, ``"12h"``, ``"7d"`` → seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 15m, 12h, 7d)")
    return float(match.group(1)) * _UNITS_S[match.group(2) or "s"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "journal",
        help="inspect and maintain the intent journal of side-effecting tools",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="journal_command", metavar="SUBCOMMAND", required=True)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--url",
            default=os.environ.get("AGENTRT_JOURNAL_URL"),
            help="journal file or URL (default: $AGENTRT_JOURNAL_URL, else "
            "./.agentrt/journal.sqlite)",
        )
        sub.add_argument("--schema", default=None, help="PostgreSQL schema of the tables")
        sub.add_argument("--json", action="store_true", help="print JSON")

    listing = commands.add_parser("list", help="programs in the journal, newest first")
    common(listing)
    listing.add_argument(
        "--status", choices=_STATUSES, help="only programs with a step in this status"
    )
    listing.add_argument("--limit", type=int, default=50, help="at most N programs (50)")

    show = commands.add_parser("show", help="the steps of one program")
    common(show)
    show.add_argument("program_id")
    show.add_argument("--results", action="store_true", help="also print step results")

    purge = commands.add_parser("purge", help="delete old programs (whole programs only)")
    common(purge)
    purge.add_argument(
        "--older-than",
        type=parse_duration_s,
        default=None,
        help="last change older than this (7d, 12h, ...; default 7d unless --program is given)",
    )
    purge.add_argument(
        "--status",
        action="append",
        choices=_STATUSES,
        help="purge only programs whose steps all have these statuses "
        "(repeatable; default COMMITTED and FAILED)",
    )
    purge.add_argument("--program", action="append", help="only this program (repeatable)")
    purge.add_argument(
        "--any-status",
        action="store_true",
        help="ignore step statuses (also purges unresolved unknown outcomes)",
    )
    purge.add_argument("--dry-run", action="store_true", help="count, delete nothing")

    resolve = commands.add_parser("resolve", help="settle an unknown outcome by hand")
    common(resolve)
    resolve.add_argument("key", help="the step's idempotency key (from 'show' or the error)")
    outcome = resolve.add_mutually_exclusive_group(required=True)
    outcome.add_argument("--done", action="store_true", help="the effect happened")
    outcome.add_argument("--not-done", action="store_true", help="it did not: run it again")
    resolve.add_argument("--result", default="null", help="JSON result to replay (--done)")

    durations = commands.add_parser("durations", help="a tool's duration history")
    common(durations)
    durations.add_argument("tool")

    release = commands.add_parser(
        "release-lease",
        help="break a program's lease (when its holder is known to be dead)",
        description="Break the lease of PROGRAM_ID whoever holds it: it is released and its "
        "epoch incremented, so a holder that still runs is refused every further journal "
        "write, and the next run may start at once. Only for a holder known to be dead or "
        "stuck: the unknown outcomes it leaves are reconciled by the next run.",
    )
    common(release)
    release.add_argument("program_id")
    release.add_argument("--yes", action="store_true", help="really break it (else: only show)")

    parser.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    import asyncio

    from agentrt.errors import AgentrtError

    try:
        return asyncio.run(_run(args))
    except AgentrtError as exc:
        print(f"agentrt journal: {exc}", file=sys.stderr)
        return 1


async def _run(args: argparse.Namespace) -> int:
    from agentrt.journal import Journal

    journal = Journal(args.url, schema=args.schema, create=False)
    try:
        await journal.connect()  # the CLI wants a clear error, not a lazy retry
        command = args.journal_command
        if command == "list":
            return await _list(journal, args)
        if command == "show":
            return await _show(journal, args)
        if command == "purge":
            return await _purge(journal, args)
        if command == "resolve":
            return await _resolve(journal, args)
        if command == "release-lease":
            return await _release_lease(journal, args)
        return await _durations(journal, args)
    finally:
        await journal.close()


def _stamp(epoch_s: float | None) -> str:
    import datetime

    if epoch_s is None:
        return "-"
    return datetime.datetime.fromtimestamp(epoch_s, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=False)]
    for line in [header, *rows]:
        cells = (str(cell).ljust(width) for cell, width in zip(line, widths, strict=True))
        print("  ".join(cells).rstrip())


async def _list(journal: Journal, args: argparse.Namespace) -> int:
    from agentrt.journal import StepStatus

    status = StepStatus(args.status) if args.status else None
    programs = await journal.list_programs(status=status, limit=args.limit)
    leases = {r.program_id: r for r in await journal.leases([p.program_id for p in programs])}
    now = time.time()
    if args.json:
        print(
            json.dumps(
                [
                    {**_fields(p), "lease": _lease_fields(leases.get(p.program_id), now)}
                    for p in programs
                ],
                indent=2,
            )
        )
        return 0
    _print_table(
        [
            "PROGRAM",
            "STEPS",
            "COMMITTED",
            "FAILED",
            "STARTED",
            "FIRST (UTC)",
            "LAST (UTC)",
            "LEASE",
        ],
        [
            [
                p.program_id,
                str(p.steps),
                str(p.committed),
                str(p.failed),
                str(p.started),
                _stamp(p.first_at),
                _stamp(p.last_at),
                _lease_text(leases.get(p.program_id), now),
            ]
            for p in programs
        ],
    )
    return 0


def _lease_fields(lease: LeaseRecord | None, now: float) -> dict[str, object] | None:
    if lease is None:
        return None
    return {**_fields(lease), "state": lease.state(now)}


def _lease_text(lease: LeaseRecord | None, now: float) -> str:
    """``held by H (epoch N) until T``, ``expired ...``, ``released (epoch N)`` or ``-``."""
    if lease is None:
        return "-"
    state = lease.state(now)
    if state == "released":
        return f"released (epoch {lease.epoch})"
    verb = "held by" if state == "held" else "expired, was held by"
    until = (
        f"until {_stamp(lease.expires_at)}" if state == "held" else f"at {_stamp(lease.expires_at)}"
    )
    return f"{verb} {lease.holder} (epoch {lease.epoch}) {until}"


def _fields(value: DataclassInstance) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


async def _show(journal: Journal, args: argparse.Namespace) -> int:
    steps = await journal.program_steps(args.program_id)
    leases = await journal.leases([args.program_id])
    lease = leases[0] if leases else None
    now = time.time()
    if not steps and lease is None:
        print(
            f"agentrt journal: no steps recorded for program {args.program_id!r}", file=sys.stderr
        )
        return 1
    records = []
    for r in steps:
        item = {
            "thread_id": r.position.thread_id,
            "seq": r.position.seq,
            "kind": r.kind,
            "name": r.name,
            "status": r.status.value,
            "side_effect": r.side_effect,
            "idempotent": r.idempotent,
            "attempts": r.attempts,
            "key": r.key,
            "node_id": r.node_id,
            "error_type": r.error_type,
            "error_message": r.error_message,
            "created_at": r.created_at,
            "updated_at": r.updated_at,
            "duration_s": r.duration_s,
            "result_bytes": None if r.result_json is None else len(r.result_json.encode()),
        }
        if args.results:
            item["result"] = r.result
        records.append(item)
    if args.json:
        document = {
            "program_id": args.program_id,
            "lease": _lease_fields(lease, now),
            "steps": records,
        }
        print(json.dumps(document, indent=2))
        return 0
    rows = []
    for step, item in zip(steps, records, strict=True):
        what = "side effect" if step.side_effect else "read-only"
        row = [
            str(item["thread_id"]),
            str(item["seq"]),
            f"{item['kind']}:{item['name']}",
            what,
            str(item["status"]),
            str(item["attempts"]),
            "-" if step.duration_s is None else f"{step.duration_s * 1000:.1f}",
            str(item["key"]),
        ]
        if item["error_type"]:
            row[4] += f" ({item['error_type']})"
        rows.append(row)
    print(f"program {args.program_id}")
    print(f"lease: {_lease_text(lease, now)}")
    _print_table(["THREAD", "SEQ", "STEP", "KIND", "STATUS", "ATTEMPTS", "MS", "KEY"], rows)
    if args.results:
        for item in records:
            print(f"{item['thread_id']}/{item['seq']}: {json.dumps(item['result'])}")
    return 0


async def _purge(journal: Journal, args: argparse.Namespace) -> int:
    from agentrt.journal import PurgePolicy, StepStatus

    older_than = args.older_than
    if older_than is None and not args.program:
        older_than = 7 * 86400.0
    if args.any_status:
        statuses = None
    elif args.status:
        statuses = frozenset(StepStatus(s) for s in args.status)
    else:
        statuses = frozenset({StepStatus.COMMITTED, StepStatus.FAILED})
    policy = PurgePolicy(
        older_than_s=older_than,
        statuses=statuses,
        program_ids=tuple(args.program) if args.program else None,
    )
    result = await journal.purge(policy, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    if args.json:
        print(
            json.dumps(
                {"dry_run": args.dry_run, "programs": result.programs, "steps": result.steps}
            )
        )
    else:
        print(f"{verb} {result.programs} programs ({result.steps} steps)")
    return 0


async def _resolve(journal: Journal, args: argparse.Namespace) -> int:
    try:
        result = json.loads(args.result)
    except json.JSONDecodeError as exc:
        print(f"agentrt journal: --result is not JSON: {exc}", file=sys.stderr)
        return 2
    record = await journal.resolve_unknown(args.key, happened=args.done, result=result)
    if args.json:
        print(json.dumps({"key": record.key, "status": record.status.value}))
    else:
        print(f"{record.describe()}")
    return 0


async def _durations(journal: Journal, args: argparse.Namespace) -> int:
    history = await journal.tool_duration_history(args.tool)
    prediction = await journal.predict_tool_duration(args.tool)
    if args.json:
        print(json.dumps({"tool": args.tool, "recent_s": history, "predicted_s": prediction}))
    else:
        shown = "none" if prediction is None else f"{prediction:.3f} s (median)"
        print(f"tool {args.tool}: {len(history)} recent runs, prediction {shown}")
    return 0


async def _release_lease(journal: Journal, args: argparse.Namespace) -> int:
    now = time.time()
    leases = await journal.leases([args.program_id])
    if not leases:
        print(f"agentrt journal: program {args.program_id!r} has no lease", file=sys.stderr)
        return 1
    if not args.yes:
        print(f"program {args.program_id}: lease {_lease_text(leases[0], now)}")
        print(
            "agentrt journal: not broken; pass --yes to break it (only if the holder is dead: "
            "a holder that still runs is stopped at its next journal write)",
            file=sys.stderr,
        )
        return 2
    before = await journal.break_lease(args.program_id)
    if before is None:  # purged meanwhile
        print(f"agentrt journal: program {args.program_id!r} has no lease", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"program_id": args.program_id, "was": _lease_fields(before, now)}))
    else:
        print(
            f"broke the lease of program {args.program_id} (was {_lease_text(before, now)}); "
            f"epoch now {before.epoch + 1}: the next run may start"
        )
    return 0
