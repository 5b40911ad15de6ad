"""Run pytest while stalling it, as a busy shared CI machine does, and count the failures.

The pytest process is stopped (SIGSTOP) for ``--stall`` seconds, resumed (SIGCONT), left to
run for a random ``--gap`` interval, stopped again, and so on until it ends. Each run's failed
tests are printed, then how many runs each test failed in. Arguments after ``--`` go to pytest
(default: the whole suite, which is long; name a file or directory).

    .venv/bin/python scripts/stall_tests.py --runs 5 -- tests/serving/test_http_protocols.py
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def _signal(proc: subprocess.Popen[str], signum: int) -> bool:
    """Send ``signum`` to ``proc``; False when it is gone."""
    try:
        os.kill(proc.pid, signum)
    except ProcessLookupError:
        return False
    return True


def _stall(
    proc: subprocess.Popen[str],
    stall_s: float,
    gap: tuple[float, float],
    rng: random.Random,
    done: threading.Event,
) -> int:
    """Stop and resume ``proc`` until ``done`` is set; how many stalls it took. A stall, once
    begun, is always ended (SIGCONT) before this returns."""
    stalls = 0
    while not done.wait(rng.uniform(*gap)) and _signal(proc, signal.SIGSTOP):
        stalls += 1
        time.sleep(stall_s)
        if not _signal(proc, signal.SIGCONT):
            break
    return stalls


def _one_run(
    pytest_args: list[str], stall_s: float, gap: tuple[float, float], rng: random.Random
) -> tuple[list[str], int, int]:
    """The failed test ids of one stalled pytest run, its exit code and the stalls it took."""
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *pytest_args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()
    stalls: list[int] = []
    stopper = threading.Thread(target=lambda: stalls.append(_stall(proc, stall_s, gap, rng, done)))
    stopper.start()
    try:
        output, _ = proc.communicate()
    finally:
        done.set()
        stopper.join()
        if proc.poll() is None:  # interrupted: leave no process behind
            proc.kill()
    return _FAILED.findall(output), proc.returncode, stalls[0] if stalls else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="pytest runs (default 5)")
    parser.add_argument(
        "--stall", type=float, default=0.8, help="seconds each stall lasts (default 0.8)"
    )
    parser.add_argument(
        "--gap",
        type=float,
        nargs=2,
        default=(0.5, 2.0),
        metavar=("MIN", "MAX"),
        help="seconds of running between stalls, drawn uniformly (default 0.5 2.0)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the stall timing")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    failures: collections.Counter[str] = collections.Counter()
    failed_runs = 0
    for run in range(1, args.runs + 1):
        failed, code, stalls = _one_run(args.pytest_args, args.stall, tuple(args.gap), rng)
        failures.update(failed)
        failed_runs += code != 0
        print(f"run {run}: exit {code}, {stalls} stalls, {len(failed)} failed", flush=True)
        for test in failed:
            print(f"  {test}", flush=True)
    print(f"{failed_runs} of {args.runs} runs failed")
    for test, count in failures.most_common():
        print(f"{count:3d}/{args.runs}  {test}")
    return 1 if failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
