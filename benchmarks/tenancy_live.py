"""Tenancy live: a victim's sequential program against clients that rotate program ids.

Attained-service scheduling (PLAS, the controller's default; Autellix arXiv 2502.13965) trusts
program ids. A client that sends every call under a fresh program id, or untagged (each call a
program of its own), starts every call at zero attained service, ahead of any program that has
made progress. ``benchmarks/tenancy.py`` measures this in the simulator; this benchmark runs
the live stack: a controller (every default) embedded on loopback in front of one engine
emulator with few batch slots (``--max-num-seqs``, default 4), both real HTTP servers.

* **victim**: one program of ``--calls`` sequential chat calls (each tagged, each extending
  the conversation), ``--max-tokens`` output tokens each;
* **attackers**: ``--attackers`` clients, each keeping ``--in-flight`` calls outstanding in a
  loop, half rotating a fresh program id on every call, half sending untagged calls, until
  the victim finishes or ``--timeout-s`` passes.

Configurations: ``alone`` (the victim, no attackers, no keys); ``no keys`` (attackers, one
tenant: no API keys configured); ``one shared key`` (attackers and victim hold the same key:
one tenant); ``two keys`` (victim and attackers each their own tenant's key: fair shares
between tenants, on by default with more than one tenant, docs/security.md). Reported per
configuration: the median over ``--reps`` of the victim's completion time (a run that did not
finish counts as ``--timeout-s`` and is flagged), its calls done, and the attackers' calls
answered per second.

Run (from the repository root; a few minutes)::

    .venv/bin/python benchmarks/tenancy_live.py                 # prints the table
    .venv/bin/python benchmarks/tenancy_live.py --write-docs    # docs/benchmarks.md section
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt.protocol import CallTags  # noqa: E402
from agentrt_controller.backends.spec import BackendSpec  # noqa: E402
from agentrt_controller.service import ControllerConfig, serve_controller  # noqa: E402
from agentrt_emulator.core.types import EngineConfig  # noqa: E402
from agentrt_emulator.server import (  # noqa: E402
    DEFAULT_MODEL_NAME,
    EmulatorConfig,
    serve_engine_in_thread,
)
from benchmarks import _report  # noqa: E402

HEADING = "## Tenancy live: id rotation against a victim"
VICTIM_KEY = "victim-key-0001"
ATTACKER_KEY = "attacker-key-0002"

_TWO_KEYS = f"victim={VICTIM_KEY},attacker={ATTACKER_KEY}"
#: label -> (attackers on?, API keys the controller holds, victim's key, attackers' key,
#: ``tenant_isolation`` config: the per-tenant caps on calls in flight, docs/tenancy.md).
CONFIGURATIONS: dict[str, tuple[bool, str | None, str | None, str | None, dict[str, Any]]] = {
    "alone": (False, None, None, None, {}),
    "no keys": (True, None, None, None, {}),
    "one shared key": (True, f"all={VICTIM_KEY}", VICTIM_KEY, VICTIM_KEY, {}),
    "two keys": (True, _TWO_KEYS, VICTIM_KEY, ATTACKER_KEY, {}),
    "two keys, caps": (True, _TWO_KEYS, VICTIM_KEY, ATTACKER_KEY, {"enabled": True}),
    "two keys, surplus 0.0625": (
        True,
        _TWO_KEYS,
        VICTIM_KEY,
        ATTACKER_KEY,
        {"surplus_share": 0.0625},
    ),
}


@dataclass(slots=True)
class Run:
    """One run of one configuration."""

    label: str
    #: Victim's completion time (seconds), or the timeout when it did not finish.
    victim_s: float
    victim_calls: int
    finished: bool
    attacker_calls: int
    #: Attacker calls answered per second over the run.
    attacker_rate: float
    scheduler: str


def _auth(key: str | None) -> dict[str, str]:
    return {} if key is None else {"authorization": f"Bearer {key}"}


def _body(messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
    return {
        "model": DEFAULT_MODEL_NAME,
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
    }


async def _victim(
    http: httpx.AsyncClient, url: str, key: str | None, args: argparse.Namespace, done: list[int]
) -> None:
    messages = [{"role": "system", "content": "You are a careful research agent. " * 20}]
    for index in range(args.calls):
        messages.append({"role": "user", "content": f"Step {index}: look up item {index}. " * 6})
        tags = CallTags(
            program_id="victim", session_id="victim", thread_id="main", node_id=f"v{index}"
        )
        answer = await http.post(
            url + "/v1/chat/completions",
            json=_body(messages, args.max_tokens),
            headers={**_auth(key), **tags.to_headers()},
        )
        answer.raise_for_status()
        content = answer.json()["choices"][0]["message"]["content"] or ""
        messages.append({"role": "assistant", "content": content})
        done[0] += 1


async def _attacker(
    http: httpx.AsyncClient,
    url: str,
    key: str | None,
    index: int,
    args: argparse.Namespace,
    answered: list[int],
) -> None:
    call = 0
    while True:
        call += 1
        headers = _auth(key)
        if index % 2 == 0:  # a fresh program id on every call
            tags = CallTags(
                program_id=f"rot-{index}-{call}", session_id=f"a{index}", thread_id="main",
                node_id="n",
            )  # fmt: skip
            headers.update(tags.to_headers())
        prompt = [{"role": "user", "content": f"Attacker {index} call {call}: summarise. " * 25}]
        answer = await http.post(
            url + "/v1/chat/completions", json=_body(prompt, args.max_tokens), headers=headers
        )
        if answer.status_code == 200:
            answered[0] += 1
        else:  # 429 over a quota: back off as told
            await anyio.sleep(float(answer.headers.get("retry-after", "1")))


async def _one_run(label: str, engine_url: str, args: argparse.Namespace) -> Run:
    attackers_on, keys, victim_key, attacker_key, isolation = CONFIGURATIONS[label]
    config = ControllerConfig(
        port=0,
        backends=(BackendSpec(engine_url, kind="emulator"),),
        api_keys=keys,
        tenant_isolation=isolation,
    )
    apps: list[Any] = []
    done, answered = [0], [0]
    limits = httpx.Limits(max_connections=args.attackers * args.in_flight + 4)
    async with (
        serve_controller(config, on_app=apps.append) as url,
        httpx.AsyncClient(timeout=args.timeout_s + 30, limits=limits) as http,
    ):
        started = time.perf_counter()
        finished = False
        async with anyio.create_task_group() as group:
            if attackers_on:
                for index in range(args.attackers):
                    for _ in range(args.in_flight):
                        group.start_soon(_attacker, http, url, attacker_key, index, args, answered)
                await anyio.sleep(args.warmup_s)  # the attackers' calls fill the queues first
                started = time.perf_counter()
            with anyio.move_on_after(args.timeout_s):
                await _victim(http, url, victim_key, args, done)
                finished = True
            elapsed = time.perf_counter() - started
            group.cancel_scope.cancel()
        scheduler = apps[0].core.dispatcher.scheduler.name
    return Run(
        label,
        elapsed if finished else args.timeout_s,
        done[0],
        finished,
        answered[0],
        answered[0] / max(elapsed, 1e-9),
        scheduler,
    )


async def _measure(engine_url: str, args: argparse.Namespace) -> list[Run]:
    runs: list[Run] = []
    for rep in range(args.reps):
        for label in args.configs:
            run = await _one_run(label, engine_url, args)
            print(
                f"rep {rep + 1} {label:15s} victim {run.victim_s:6.1f} s "
                f"({run.victim_calls}/{args.calls} calls{'' if run.finished else ', unfinished'}) "
                f"attackers {run.attacker_rate:5.1f} calls/s scheduler={run.scheduler}",
                file=sys.stderr,
            )
            runs.append(run)
    return runs


def _summary(runs: list[Run], label: str) -> dict[str, Any]:
    mine = [r for r in runs if r.label == label]
    return {
        "label": label,
        "victim_s": statistics.median(r.victim_s for r in mine),
        "victim_calls": statistics.median(r.victim_calls for r in mine),
        "unfinished": sum(not r.finished for r in mine),
        "reps": len(mine),
        "attacker_rate": statistics.median(r.attacker_rate for r in mine),
        "scheduler": mine[0].scheduler,
    }


def _bound(row: Mapping[str, Any]) -> str:
    """``≥ `` when the median run did not finish (its time is the time limit: a bound)."""
    return "≥ " if row["unfinished"] * 2 > row["reps"] else ""


def _section(saved: Mapping[str, Any]) -> str:
    args = saved["args"]
    rows = saved["summary"]
    alone = next((r["victim_s"] for r in rows if r["label"] == "alone"), None)
    lines = [
        HEADING,
        "",
        f"Live stack on loopback: the controller (every default) in front of one engine "
        f"emulator with {args['max_num_seqs']} batch slots. A victim program of "
        f"{args['calls']} sequential calls ({args['max_tokens']} output tokens each) against "
        f"{args['attackers']} attacker clients with {args['in_flight']} calls in flight each "
        "(half rotate a fresh program id on every call, half send untagged calls). Medians of "
        f"{args['reps']} runs; a victim not done after {args['timeout_s']:g} s counts as "
        f"{args['timeout_s']:g} s (so ≥ marks a lower bound). Measured {saved['when']} on 2 CPU "
        "cores shared with other work; controller, emulator and clients in one process (the "
        "emulator on a thread of its own).",
        "",
        *_report.table(
            [
                "configuration",
                "scheduler",
                "victim done (s)",
                "vs alone",
                "victim calls done",
                "runs unfinished",
                "attacker calls/s",
            ],
            (
                [
                    r["label"],
                    r["scheduler"],
                    _bound(r) + f"{r['victim_s']:.1f}",
                    "-" if alone is None else _bound(r) + f"{r['victim_s'] / alone:.1f}x",
                    f"{r['victim_calls']:g}/{args['calls']}",
                    f"{r['unfinished']}/{r['reps']}",
                    "-" if r["label"] == "alone" else f"{r['attacker_rate']:.1f}",
                ]
                for r in rows
            ),
        ),
        "",
        "With no keys or one shared key every caller is one tenant, so PLAS orders the "
        "attackers' fresh programs (zero attained service) ahead of the victim's program; "
        "with two keys the controller schedules fair shares between the two tenants "
        "(`scheduling/tenancy.py`, docs/security.md) and PLAS inside each, so rotating ids "
        "reorders only the attackers' own calls. `caps` adds the per-tenant caps on calls in "
        "flight (`tenant_isolation = {enabled = true}`; `scheduling/isolation.py`, "
        "docs/tenancy.md): the victim's demand is served first and the attackers' tenant, "
        "above its share, gets the rest of the engine's batch; `surplus 0.0625` = the "
        "attackers hold at most that fraction of the batch (at least one call) while the "
        "victim is active.",
        "",
        "Reproduce: `.venv/bin/python benchmarks/tenancy_live.py --write-docs` "
        f"(`--reps {args['reps']} --attackers {args['attackers']} --in-flight "
        f"{args['in_flight']} --calls {args['calls']}`).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=15, help="victim's sequential calls")
    parser.add_argument("--attackers", type=int, default=6, help="attacker clients")
    parser.add_argument(
        "--in-flight", type=int, default=4, help="calls each attacker keeps in flight"
    )
    parser.add_argument("--max-tokens", type=int, default=24, help="output tokens per call")
    parser.add_argument("--max-num-seqs", type=int, default=4, help="emulator batch slots")
    parser.add_argument("--reps", type=int, default=3, help="runs per configuration")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="victim's time limit")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="attackers start first")
    parser.add_argument(
        "--configs", nargs="+", default=list(CONFIGURATIONS), choices=list(CONFIGURATIONS)
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--from-json", metavar="FILE", help="render saved --json output")
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
    else:
        engine = EmulatorConfig(engine=EngineConfig(max_num_seqs=args.max_num_seqs))
        with serve_engine_in_thread(engine) as running:
            runs = anyio.run(_measure, running.base_url, args)
        saved = {
            "args": {k: v for k, v in vars(args).items() if k not in ("json", "write_docs")},
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "runs": [dataclasses.asdict(r) for r in runs],
            "summary": [_summary(runs, label) for label in args.configs],
        }
    section = _section(saved)
    print(json.dumps(saved, indent=2) if args.json else section)
    if args.write_docs:
        _report.replace_section(ROOT / "docs" / "benchmarks.md", HEADING, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
