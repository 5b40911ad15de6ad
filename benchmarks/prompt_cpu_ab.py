"""The controller's CPU per call against the prompt's length, two builds side by side.

One instant backend (``benchmarks/controller_overhead.py``'s) and two ``agentrt controller
serve`` processes in front of it, each run from its own checkout (``--base`` and ``--new``:
folders holding the packages), both with ``controller_overhead.py``'s settings (``--policy
plas``, an admission window of 32). Blocks of ``--calls`` sequential calls with that script's
long prompts (a history of 1,000-word turns that every call repeats, then a short new message;
``max_tokens`` 1; with ``--stream`` streamed) go to one controller, then the other, for every
size, ``--rounds`` times, the order alternating each round: a load that drifts on a shared
machine falls on both builds alike. CPU per call is the controller's on-CPU time over its
block, summed over its threads from ``/proc/PID/task/*/schedstat`` (nanoseconds; ``/proc``'s
``stat`` counts 10 ms ticks, too coarse for a block of calls). Printed per size: the median
and range per build, the median and range of the rounds' ratios new ÷ base; and per build the
largest size's median ÷ the smallest's.

Run::

    git worktree add /tmp/base main        # the build to compare against
    .venv/bin/python benchmarks/prompt_cpu_ab.py --base /tmp/base --new . \\
        --prompt-words 1000,32000,128000 --rounds 8 --calls 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import controller_overhead as overhead  # noqa: E402
from benchmarks._processes import free_port  # noqa: E402

#: The monorepo's package folders, each put on a build's PYTHONPATH.
PACKAGES = ("agentrt", "serving", "controller", "emulator", "simulator", "adapters", "demo")


def on_cpu_s(pid: int) -> float:
    """Seconds on a CPU of every thread of ``pid`` so far (``/proc/PID/task/*/schedstat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


@contextlib.contextmanager
def _controller(checkout: Path, backend_port: int, port: int) -> Iterator[int]:
    env = dict(os.environ, PYTHONPATH=":".join(str(checkout / p) for p in PACKAGES))
    command = overhead.controller_command(port, backend_port)
    proc = subprocess.Popen(command, cwd=checkout, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def run(args: argparse.Namespace, builds: dict[str, Path]) -> str:
    backend_port = free_port()
    serve = [sys.executable, overhead.__file__, "--serve-backend", str(backend_port)]
    async with contextlib.AsyncExitStack() as stack:
        stack.enter_context(overhead._process(serve))
        await overhead._wait_ready(backend_port, b"/health")
        targets = {}
        for name, checkout in builds.items():
            port = free_port()
            pid = stack.enter_context(_controller(checkout, backend_port, port))
            await overhead._wait_ready(port, b"/health")
            conn = await stack.enter_async_context(overhead._Connection(port))
            targets[name] = (pid, conn)
        variants = iter(range(10**9))

        def body(words: int) -> bytes:
            raw = overhead.prompt_body(words, next(variants))
            return raw[:-1] + b', "stream": true}' if args.stream else raw

        for words in args.prompt_words:  # warm-up: every size once through each
            for _, conn in targets.values():
                for _ in range(5):
                    await conn.call(body(words))
        per_call: dict[tuple[str, int], list[float]] = {}
        for round_index in range(args.rounds):
            order = list(targets) if round_index % 2 == 0 else list(reversed(targets))
            for words in args.prompt_words:
                for name in order:
                    pid, conn = targets[name]
                    bodies = [body(words) for _ in range(args.calls)]
                    before = on_cpu_s(pid)
                    for one in bodies:
                        await conn.call(one)
                    spent = (on_cpu_s(pid) - before) / args.calls
                    per_call.setdefault((name, words), []).append(spent * 1e6)
    return report(per_call, args.prompt_words)


def report(per_call: dict[tuple[str, int], list[float]], sizes: list[int]) -> str:
    lines = [f"load average {os.getloadavg()[0]:.2f}; controller CPU µs per call, median [range]"]
    for words in sizes:
        base, new = per_call[("base", words)], per_call[("new", words)]
        ratios = [n / b for b, n in zip(base, new, strict=True)]
        lines.append(
            f"{words:>7,} words: base {statistics.median(base):6.0f} [{min(base):.0f}–"
            f"{max(base):.0f}]  new {statistics.median(new):6.0f} [{min(new):.0f}–"
            f"{max(new):.0f}]  new ÷ base {statistics.median(ratios):.2f} "
            f"[{min(ratios):.2f}–{max(ratios):.2f}]"
        )
    for name in ("base", "new"):
        largest = statistics.median(per_call[(name, sizes[-1])])
        smallest = statistics.median(per_call[(name, sizes[0])])
        lines.append(f"{name}: {sizes[-1]:,} words ÷ {sizes[0]:,} words = {largest / smallest:.2f}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the checkout to compare against")
    parser.add_argument("--new", default=str(ROOT), help="the checkout measured (default: this)")
    parser.add_argument(
        "--prompt-words", type=overhead.word_counts,
        default=[1000, 32000, 128000], help="comma-separated prompt sizes, smallest first",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=8, help="blocks per build and size")
    parser.add_argument("--calls", type=int, default=40, help="sequential calls per block")
    parser.add_argument("--stream", action="store_true", help="streamed calls")
    args = parser.parse_args()
    if not args.prompt_words:
        parser.error("--prompt-words needs at least one size")
    builds = {"base": Path(args.base).resolve(), "new": Path(args.new).resolve()}
    print(asyncio.run(run(args, builds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
