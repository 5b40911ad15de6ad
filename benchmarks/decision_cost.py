"""Decision cost at many backends: µs of CPU per routing + admission decision, and the size of
the prefix index, at 4 / 16 / 64 / 256 backends.

The policy objects are the controller's own, built as ``agentrt controller serve`` builds them
with no policy flag (``agentrt_controller.service.core.policies.build_dispatcher`` on a default
``ControllerConfig``: PLAS, the adaptive admission window, the ``prefix`` router with its
prefix index and program affinity). The state is what a busy controller holds:

* ``--programs`` live programs (default 2,000) in the process table, of three kinds, each kind
  with its own system prompt (48 blocks of 16 tokens) that every program of the kind extends;
  each program's history grows by 2–8 blocks per call up to 256 blocks (4,096 tokens), then
  the program ends and a new one starts in its place;
* a prefix index warmed by ``--warmup-rounds`` rounds of real decisions (every admitted call is
  finished, so its chain is recorded on the backend the router chose, as the service does);
* scraped gauges per backend (KV usage between 0.2 and 0.9, waiting 0–2, a new sample per
  drain round) and an adaptive window per backend, grown by the warm-up;
* the views handed to ``admit`` are built as ``BackendPool.views`` builds them: a backend's
  view is the same object as in the previous round while nothing in it changed.

Two decisions are timed, each round with calls of random live programs:

* **drain**: every backend has room; ``--batch`` calls are submitted and one ``admit`` admits
  them all — every call is routed among all backends (the router's worst case);
* **steady**: a standing queue of ``--queue`` calls and one free slot on one backend (an
  overloaded controller after one call finished): ``submit`` of one call, ``admit`` of one.

µs per decision = CPU time (``time.process_time_ns``) of ``submit`` + ``admit`` divided by the
calls admitted; median over ``--reps`` rounds; several rounds per repetition. The prefix
index's memory is measured with ``tracemalloc`` (bytes allocated in
``routing/prefix_index.py`` and still live after the warm-up) and its element count.

    .venv/bin/python benchmarks/decision_cost.py --write-docs
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrt_controller.keys import ProgramKey  # noqa: E402
from agentrt_controller.routing.pipeline import PipelineRouter  # noqa: E402
from agentrt_controller.routing.prefix_index import PrefixIndex  # noqa: E402
from agentrt_controller.routing.pruning import PRUNE_MIN_CANDIDATES  # noqa: E402
from agentrt_controller.scheduling.admission import AdaptiveWindowAdmission  # noqa: E402
from agentrt_controller.scheduling.api import BackendView  # noqa: E402
from agentrt_controller.scheduling.call import CallEntry, CallFacts  # noqa: E402
from agentrt_controller.scheduling.dispatcher import Dispatcher  # noqa: E402
from agentrt_controller.service.config import ControllerConfig  # noqa: E402
from agentrt_controller.service.core.policies import build_dispatcher  # noqa: E402
from benchmarks import _report  # noqa: E402

HEADING = "## Decision cost at many backends"
BACKEND_COUNTS = (4, 16, 64, 256)
#: Blocks of each kind's system prompt, and the longest program history (blocks).
SYSTEM_BLOCKS = 48
MAX_HISTORY_BLOCKS = 256
KINDS = 3


@dataclass
class LivePrograms:
    """Live programs and their prompt chains (module docstring); ``rng`` decides everything."""

    count: int
    rng: random.Random
    #: Per kind: the system prompt's chain elements.
    system: list[list[int]] = field(default_factory=list)
    #: Per slot: (program id, kind, chain elements of its own history).
    slots: list[tuple[str, int, list[int]]] = field(default_factory=list)
    started: int = 0
    calls: int = 0

    def __post_init__(self) -> None:
        self.system = [self._fresh(SYSTEM_BLOCKS) for _ in range(KINDS)]
        self.slots = [self._new_program() for _ in range(self.count)]

    def _fresh(self, blocks: int) -> list[int]:
        return [self.rng.getrandbits(63) for _ in range(blocks)]

    def _new_program(self) -> tuple[str, int, list[int]]:
        self.started += 1
        return (f"program-{self.started:07d}", self.started % KINDS, [])

    def next_call(self, now_s: float) -> tuple[CallFacts, ProgramKey | None, ProgramKey | None]:
        """A call of a random live program: (the call, a program that ended to make room or
        ``None``, the program that started in its place or ``None``)."""
        slot = self.rng.randrange(self.count)
        program_id, kind, history = self.slots[slot]
        ended = started = None
        if len(history) >= MAX_HISTORY_BLOCKS:
            ended = ProgramKey.untagged(program_id)
            program_id, kind, history = self.slots[slot] = self._new_program()
            started = ProgramKey.untagged(program_id)
        history += self._fresh(self.rng.randint(2, 8))
        chain = tuple(self.system[kind] + history)
        self.calls += 1
        call = CallFacts(
            call_id=f"{program_id}/{self.calls}",
            program=ProgramKey.untagged(program_id),
            thread_id="main",
            arrival_s=now_s,
            prompt_tokens=16 * len(chain),
            block_hashes=chain,
        )
        return call, ended, started


@dataclass
class Bench:
    """One controller's policies over ``backends`` backends, and the driver's view of them."""

    backends: int
    programs: int
    seed: int
    dispatcher: Dispatcher = field(init=False)
    live: LivePrograms = field(init=False)
    ids: list[str] = field(init=False)
    in_flight: dict[str, int] = field(init=False)
    kv_usage: dict[str, float] = field(init=False)
    #: Per backend: its last view (reused while unchanged, as the pool does).
    last_views: dict[str, BackendView] = field(init=False, default_factory=dict)
    rng: random.Random = field(init=False)
    now_s: float = 0.0
    sample: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        config = ControllerConfig()
        self.dispatcher = build_dispatcher(config, config.cost)
        self.live = LivePrograms(self.programs, random.Random(self.seed + 1))
        self.ids = [f"backend-{i:03d}" for i in range(self.backends)]
        self.in_flight = dict.fromkeys(self.ids, 0)
        self.kv_usage = {b: self.rng.uniform(0.2, 0.9) for b in self.ids}
        for program_id, _, _ in self.live.slots:
            self.dispatcher.on_program_start(ProgramKey.untagged(program_id), self.now_s)

    @property
    def index(self) -> PrefixIndex:
        router = self.dispatcher.router
        assert isinstance(router, PipelineRouter)
        (index,) = [o for o in router.observers if isinstance(o, PrefixIndex)]
        return index

    def views(self, *, room_only: str | None = None) -> list[BackendView]:
        """The backends as the service sees them; ``room_only``: every other backend is full
        (its in-flight count at its current window)."""
        admission = self.dispatcher.admission
        assert isinstance(admission, AdaptiveWindowAdmission)
        out = []
        for backend in self.ids:
            in_flight = self.in_flight[backend]
            if room_only is not None:
                window = int(admission.window(backend))
                in_flight = window - 1 if backend == room_only else window
            last = self.last_views.get(backend)
            if (
                last is None
                or last.in_flight != in_flight
                or last.metrics_at_s != float(self.sample)
            ):
                last = self.last_views[backend] = BackendView(
                    backend_id=backend,
                    in_flight=in_flight,
                    num_running=in_flight,
                    num_waiting=self.sample % 3,
                    kv_cache_usage=self.kv_usage[backend],
                    metrics_at_s=float(self.sample),
                )
            out.append(last)
        return out

    def submit(self, n: int) -> list[CallFacts]:
        calls = []
        for _ in range(n):
            call, ended, started = self.live.next_call(self.now_s)
            if ended is not None and started is not None:
                self.dispatcher.on_program_end(ended, self.now_s)
                self.dispatcher.on_program_start(started, self.now_s)
            calls.append(call)
        return calls

    def finish(self, call: CallEntry, backend: str) -> None:
        """The call streamed 50 tokens and finished (what the service reports)."""
        self.dispatcher.on_tokens(call, 50, self.now_s)
        service_s = 1e-4 * call.facts.prompt_tokens / 4 + 1e-2 * 50
        self.dispatcher.on_finish(call, backend, service_s, self.now_s)

    def drain_round(self, batch: int) -> tuple[int, int]:
        """Submit ``batch`` calls, admit them with room everywhere, finish them; returns
        (CPU ns of submit + admit, calls admitted)."""
        self.now_s += 0.05
        self.sample += 1
        calls = self.submit(batch)
        views = self.views()
        dispatcher, now = self.dispatcher, self.now_s
        start = time.process_time_ns()
        for call in calls:
            dispatcher.submit(call, now)
        admitted = dispatcher.admit(now, views)
        elapsed = time.process_time_ns() - start
        for admission in admitted:
            self.finish(admission.call, admission.backend_id)
        return elapsed, len(admitted)

    def steady_rounds(self, queue: int, rounds: int) -> list[int]:
        """A standing queue of ``queue`` calls; per round one slot frees on a random backend,
        one call arrives and one is admitted. Returns CPU ns per round; drains the queue."""
        self.now_s += 0.05
        dispatcher = self.dispatcher
        for call in self.submit(queue):
            dispatcher.submit(call, self.now_s)
        times = []
        for _ in range(rounds):
            self.now_s += 0.001
            (call,) = self.submit(1)
            views = self.views(room_only=self.rng.choice(self.ids))
            now = self.now_s
            start = time.process_time_ns()
            dispatcher.submit(call, now)
            admitted = dispatcher.admit(now, views)
            times.append(time.process_time_ns() - start)
            for admission in admitted:
                self.finish(admission.call, admission.backend_id)
        for admission in dispatcher.admit(self.now_s, self.views()):  # empty the queue
            self.finish(admission.call, admission.backend_id)
        return times


def measure(
    backends: int,
    *,
    programs: int,
    warmup_rounds: int,
    batch: int,
    reps: int,
    queue: int,
    seed: int,
) -> dict[str, Any]:
    """One backend count: the figures of the table (module docstring)."""
    tracemalloc.start()
    bench = Bench(backends, programs, seed)
    for _ in range(warmup_rounds):
        bench.drain_round(batch)
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    index_file = str(Path(sys.modules[PrefixIndex.__module__].__file__ or "prefix_index.py"))
    index_bytes = sum(
        stat.size
        for stat in snapshot.filter_traces([tracemalloc.Filter(True, index_file)]).statistics(
            "filename"
        )
    )
    drain = []
    for _ in range(reps):
        elapsed, admitted = bench.drain_round(batch)
        drain.append(elapsed / max(admitted, 1) / 1000)
    steady = [ns / 1000 for ns in bench.steady_rounds(queue, reps)]
    index = bench.index
    return {
        "backends": backends,
        "drain_us": statistics.median(drain),
        "drain_us_p90": _quantile(drain, 0.9),
        "steady_us": statistics.median(steady),
        "steady_us_p90": _quantile(steady, 0.9),
        "index_elements": index.size(),
        "index_bytes": index_bytes,
        "index_capacity_blocks": index.capacity_blocks,
        "live_programs": len(bench.dispatcher.table.keys()),
    }


def combine(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One row from several runs of :func:`measure`: the median of each figure."""
    row: dict[str, Any] = {"runs": len(runs)}
    for key, value in runs[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            row[key] = statistics.median(r[key] for r in runs)
        else:
            row[key] = value
    return row


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def markdown(
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    baseline: list[dict[str, Any]] | None = None,
) -> str:
    """The docs section; ``baseline``: rows of the same benchmark on earlier code, shown as
    "before" columns (same backend counts)."""
    base = rows[0]
    before = {r["backends"]: r for r in baseline or []}
    lines = [
        HEADING,
        "",
        f"`benchmarks/decision_cost.py` — run {args.date} on this 2-core machine (shared with "
        "other work: absolute µs vary with its load, ratios within one run less). The "
        "controller's own policy objects as `agentrt controller serve` builds them with no "
        "policy flag (PLAS, adaptive window, `prefix` router). State: "
        f"{args.programs:,} live programs of three kinds (system prompts of {SYSTEM_BLOCKS} "
        f"blocks, histories up to {MAX_HISTORY_BLOCKS} blocks), a prefix index warmed by "
        f"{args.warmup_rounds} rounds of {args.batch} real decisions. **drain** = every "
        f"backend has room and {args.batch} queued calls are admitted in one `admit` (each "
        "routed among all backends); **steady** = a standing queue of "
        f"{args.queue} calls, one slot free on one backend, one call submitted and one "
        "admitted. CPU µs per decision (`submit` + `admit`), median (p90) over "
        f"{args.reps} rounds, then the median over {rows[0].get('runs', 1)} runs (seeds; "
        "backend counts interleaved); index memory = bytes allocated in "
        "`routing/prefix_index.py` and still live after the warm-up (`tracemalloc`), with its "
        "elements (all backends).",
        "",
    ]
    header = [
        "backends",
        "drain µs / decision",
        "÷ 4 backends",
        "steady µs / decision",
        "÷ 4 backends",
        "index elements",
        "index memory (MB)",
        "bytes / element",
    ]
    body = [
        [
            str(r["backends"]),
            f"{r['drain_us']:.1f} ({r['drain_us_p90']:.1f})",
            f"{r['drain_us'] / base['drain_us']:.2f}",
            f"{r['steady_us']:.1f} ({r['steady_us_p90']:.1f})",
            f"{r['steady_us'] / base['steady_us']:.2f}",
            f"{r['index_elements']:,}",
            f"{r['index_bytes'] / 1e6:.1f}",
            f"{r['index_bytes'] / max(r['index_elements'], 1):.0f}",
        ]
        for r in rows
    ]
    lines += _report.table(header, body)
    if before:
        lines += [
            "",
            f"Before the changes described below ({args.baseline_label}), same run settings:",
            "",
        ]
        lines += _report.table(
            ["backends", "drain µs before → now", "steady µs before → now", "÷ 4 backends, drain"],
            [
                [
                    str(r["backends"]),
                    f"{before[r['backends']]['drain_us']:.1f} → {r['drain_us']:.1f}",
                    f"{before[r['backends']]['steady_us']:.1f} → {r['steady_us']:.1f}",
                    f"{before[r['backends']]['drain_us'] / baseline[0]['drain_us']:.2f} → "
                    f"{r['drain_us'] / base['drain_us']:.2f}",
                ]
                for r in rows
                if r["backends"] in before and baseline
            ],
        )
    holders_rows = [r for r in rows if r["backends"] >= PRUNE_MIN_CANDIDATES]
    plain_rows = [r for r in rows if r["backends"] < PRUNE_MIN_CANDIDATES]

    def per_element(row: dict[str, Any]) -> float:
        return float(row["index_bytes"]) / max(int(row["index_elements"]), 1)

    last = rows[-1]
    # The first backend count that takes the pruned path (the router scores every candidate
    # below PRUNE_MIN_CANDIDATES): the slope from there on is what pruning leaves.
    pruned = holders_rows[0] if holders_rows else base
    span = max(last["backends"] - pruned["backends"], 1)
    drain_slope = (last["drain_us"] - pruned["drain_us"]) / span
    steady_slope = (last["steady_us"] - pruned["steady_us"]) / span
    lines += [
        "",
        "**Nearly flat, and what is left.** The `prefix` router no longer scores every "
        "candidate: it scores, for each distinct match length among the backends (found from "
        "the prefix index's holders of the chain's elements by bisection), the least-loaded "
        "candidate, plus the program's bound backend, and reaches the decision scoring all of "
        'them would (docs/routing.md, "Cost at many backends"; '
        "`tests/routing/test_decision_equivalence.py` drives the pruned and the full router "
        "side by side); admission asks the policy only about backends whose view changed. "
        f"A decision at {last['backends']} backends costs "
        f"{last['drain_us'] / base['drain_us']:.2f}× one at {base['backends']} (drain) and "
        f"{last['steady_us'] / base['steady_us']:.2f}× (steady). Of the "
        f"{last['drain_us'] - base['drain_us']:.1f} µs a drain decision at {last['backends']} "
        f"backends costs more than one at {base['backends']}, "
        f"{pruned['drain_us'] - base['drain_us']:.1f} µs are the step to "
        f"{pruned['backends']} backends. Below {PRUNE_MIN_CANDIDATES} candidates every "
        "candidate is scored, which is cheaper there: the pruned path's fixed cost — the match "
        "levels, a walk per level, the tie check — and the holders the prefix index keeps "
        "from the first pruned decision on (an insert notes the holders of the elements new "
        "to the backend: most of a chain in the steady rounds, where the call goes to a "
        "random backend) cost about as much as scoring ~30 backends. "
        f"From {pruned['backends']} to {last['backends']} backends the cost grows by "
        f"{drain_slope:.2f} µs (drain) and {steady_slope:.2f} µs (steady) per backend per "
        "decision. What remains O(backends): per `admit`, one pass over the views (a "
        "dictionary lookup per backend; the admission policy is asked about each backend once "
        "per new scrape, i.e. once per drain round here) and building the round's (load, id) "
        "order of the candidates (O(backends log backends), shared by the round's "
        f"{args.batch} decisions in a drain round; not built in the steady state here, where "
        "one backend has room); per call, one set test of the candidates against the "
        "holders of the chain's head (in C). Scored in full, as before: a call the exact KV "
        "index can answer for some backend, other router stages, and a tie within the picker's "
        "tolerance that the scored backends cannot settle. The per-call work that does not "
        "depend on the backends is most of a decision: the scheduler, recording the chain on "
        "the chosen backend (`insert`, O(chain), now also its holders) and counting programs "
        "per head element "
        "(`note_program`, up to 512 elements; since kept in runs, its new elements and a "
        'touch per run: "Program counts in runs").',
        "",
        "**Memory.** The index held "
        f"{min(r['index_elements'] for r in rows):,}–{max(r['index_elements'] for r in rows):,}"
        " elements over all backends here, "
        f"{min(per_element(r) for r in rows):.0f}–{max(per_element(r) for r in rows):.0f} "
        "bytes each, including the program counts of shared heads"
        + (
            f"; {', '.join(f'{per_element(r):.0f}' for r in holders_rows)} bytes at "
            f"{', '.join(str(r['backends']) for r in holders_rows)} backends, where the pruning "
            "made it keep each element's holders (and a heap of each backend's oldest entry), "
            f"against {', '.join(f'{per_element(r):.0f}' for r in plain_rows)} at "
            f"{', '.join(str(r['backends']) for r in plain_rows)}, where it did not"
            if holders_rows and plain_rows
            else ""
        )
        + ". It is bounded per backend by the TTL (600 s) and by `capacity_blocks`, 65,536 "
        "elements by default (≈ 6–7 MB per backend at the cap without holders; the holders add "
        "one dictionary entry per distinct element: compare the bytes per element above), plus "
        "at most 200,000 "
        "program counts (`popularity_capacity`).",
        "",
        "Reproduce: `.venv/bin/python benchmarks/decision_cost.py --runs "
        f"{rows[0].get('runs', 1)} --programs {args.programs} --warmup-rounds "
        f"{args.warmup_rounds} --batch {args.batch} --reps {args.reps} --queue {args.queue} "
        "--write-docs` (`--quick` for a smoke run); the before rows: the same with `--json` "
        "on a checkout of the earlier commit, passed as `--baseline FILE --baseline-label "
        "...`.",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(map(str, BACKEND_COUNTS)))
    parser.add_argument("--programs", type=int, default=2000, help="live programs")
    parser.add_argument("--warmup-rounds", type=int, default=300, help="rounds before timing")
    parser.add_argument("--batch", type=int, default=32, help="calls per drain round")
    parser.add_argument("--reps", type=int, default=200, help="timed rounds per scenario")
    parser.add_argument("--queue", type=int, default=500, help="standing queue (steady)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--runs", type=int, default=3, help="whole runs (seeds seed..seed+runs-1); medians"
    )
    parser.add_argument(
        "--baseline", metavar="FILE", help="--json output of a run on earlier code: 'before' rows"
    )
    parser.add_argument(
        "--baseline-label", default="earlier code", help="what the baseline ran (for the docs)"
    )
    _report.add_date_option(parser)
    _report.add_output_options(parser, "rows")
    args = parser.parse_args(argv)
    if args.quick:
        args.programs, args.warmup_rounds, args.reps, args.queue = 200, 20, 20, 50
    counts = [int(n) for n in args.backends.split(",") if n.strip()]
    if args.from_json:
        rows = json.loads(Path(args.from_json).read_text())["rows"]
    else:
        runs: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
        for run in range(args.runs):  # backend counts interleaved: the machine's load drifts
            for n in counts:
                runs[n].append(
                    measure(
                        n,
                        programs=args.programs,
                        warmup_rounds=args.warmup_rounds,
                        batch=args.batch,
                        reps=args.reps,
                        queue=args.queue,
                        seed=args.seed + run,
                    )
                )
        rows = [combine(runs[n]) for n in counts]
    baseline = json.loads(Path(args.baseline).read_text())["rows"] if args.baseline else None
    section = markdown(rows, args, baseline)
    return _report.publish(args, section, {"rows": rows}, ROOT / "docs", HEADING)


if __name__ == "__main__":
    raise SystemExit(main())
