"""The real-vLLM benchmark's CPU-pinning helpers (benchmarks/_real_vllm_pinning.py): CPU lists, the
read-back of every process's and thread's ``Cpus_allowed_list`` from /proc, on real processes
started under ``taskset``. No vLLM needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
        reason="needs taskset and two usable CPUs",
    ),
]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("_real_vllm_pinning")


@pytest.fixture
def two_cpus() -> tuple[int, int]:
    first, second = sorted(os.sched_getaffinity(0))[:2]
    return first, second


@pytest.fixture
def pinned_group(two_cpus: tuple[int, int]) -> Iterator[subprocess.Popen[bytes]]:
    """A process group like vLLM's: a leader under ``taskset -c <second CPU>`` with a child
    and a second thread, all inheriting the pin."""
    code = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "print('ready', flush=True)\n"
        "child.wait()\n"
    )
    command = ["taskset", "-c", str(two_cpus[1]), sys.executable, "-c", code]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    with proc, proc.stdout:
        yield proc
        os.killpg(proc.pid, 9)


def test_cpu_lists_parse_and_format(bench: ModuleType) -> None:
    assert bench.parse_cpu_list("0-2,5") == frozenset({0, 1, 2, 5})
    assert bench.parse_cpu_list("1\n") == frozenset({1})
    assert bench.format_cpu_list(frozenset({5, 0, 1, 2, 7, 8})) == "0-2,5,7-8"
    with pytest.raises(ValueError):
        bench.parse_cpu_list("")


def test_the_whole_group_and_its_threads_are_read_back(
    bench: ModuleType, pinned_group: subprocess.Popen[bytes], two_cpus: tuple[int, int]
) -> None:
    pids = bench.process_group(pinned_group.pid)
    assert len(pids) == 2 and pinned_group.pid in pids  # the leader and its child
    assert bench.children(pinned_group.pid) == pids
    lines = bench.affinity("group", pids, frozenset({two_cpus[1]}))
    assert len(lines) == 2
    leader = next(line for line in lines if f"pid {pinned_group.pid} " in line)
    assert f"Cpus_allowed_list {two_cpus[1]}; threads 2 on {two_cpus[1]}" in leader


def test_a_process_outside_its_cpus_stops_the_benchmark(
    bench: ModuleType, pinned_group: subprocess.Popen[bytes], two_cpus: tuple[int, int]
) -> None:
    pids = bench.process_group(pinned_group.pid)
    with pytest.raises(SystemExit, match="pinning did not take"):
        bench.affinity("group", pids, frozenset({two_cpus[0]}))
    # A thread moved off the pin after start-up is caught too, not only the process.
    leader_threads = sorted(int(t.name) for t in Path(f"/proc/{pinned_group.pid}/task").iterdir())
    os.sched_setaffinity(leader_threads[-1], set(two_cpus))
    with pytest.raises(SystemExit, match="threads 1 on"):
        bench.affinity("group", [pinned_group.pid], frozenset({two_cpus[1]}))


def test_pinning_is_resolved_from_the_machine(bench: ModuleType) -> None:
    assert not bench.resolve_pinning("off", "1", "0").on
    usable = sorted(os.sched_getaffinity(0))
    pinning = bench.resolve_pinning("auto", str(usable[1]), str(usable[0]))
    assert pinning.engine == frozenset({usable[1]})
    assert pinning.client == frozenset({usable[0]})
    with pytest.raises(SystemExit, match="overlap"):
        bench.resolve_pinning("on", str(usable[0]), str(usable[0]))
