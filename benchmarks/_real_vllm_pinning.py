"""CPU pinning for benchmarks/real_vllm.py: CPU lists, which CPUs each side gets, and the
read-back from /proc of what every process and thread of a process (group) may run on, and the
CPU time they used. Linux only (``/proc``, ``sched_getaffinity``); see docs/real-vllm.md, "The
real-engine benchmark"."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Pinning",
    "affinity",
    "children",
    "cpu_seconds",
    "format_cpu_list",
    "parse_cpu_list",
    "process_group",
    "resolve_pinning",
]


def parse_cpu_list(text: str) -> frozenset[int]:
    """A CPU list as taskset and /proc print it ("0-2,5") as a set of CPU ids."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    if not cpus:
        raise ValueError(f"empty CPU list {text!r}")
    return frozenset(cpus)


def format_cpu_list(cpus: frozenset[int]) -> str:
    """The inverse of :func:`parse_cpu_list`, ranges merged: {0, 1, 2, 5} -> "0-2,5"."""
    ordered = sorted(cpus)
    runs: list[list[int]] = []
    for cpu in ordered:
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


@dataclass(frozen=True)
class Pinning:
    """Which CPUs each side runs on; both None when not pinned."""

    #: Every vLLM process and thread.
    engine: frozenset[int] | None
    #: The load generator (this process) and the controller.
    client: frozenset[int] | None

    @property
    def on(self) -> bool:
        return self.engine is not None


def resolve_pinning(mode: str, engine_cpus: str, client_cpus: str) -> Pinning:
    """``--pin auto`` pins when this process may use >= 2 CPUs and taskset exists; ``on``
    insists (SystemExit when it cannot); ``off`` does not pin."""
    usable = frozenset(os.sched_getaffinity(0))
    possible = len(usable) >= 2 and shutil.which("taskset") is not None
    if mode == "off" or (mode == "auto" and not possible):
        return Pinning(None, None)
    if not possible:
        raise SystemExit(f"--pin on needs taskset and >= 2 usable CPUs (usable: {sorted(usable)})")
    engine, client = parse_cpu_list(engine_cpus), parse_cpu_list(client_cpus)
    if engine & client:
        raise SystemExit(f"--engine-cpus {engine_cpus} and --client-cpus {client_cpus} overlap")
    if not (engine | client) <= usable:
        raise SystemExit(f"CPUs {sorted((engine | client) - usable)} are not usable here")
    return Pinning(engine, client)


def _status(path: Path) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value.strip()
    return fields


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces): field 3 onwards."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def process_group(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (vLLM's API server and its children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                if int(_stat_fields(int(entry.name))[2]) == pgid:
                    pids.append(int(entry.name))
    return sorted(pids)


def children(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in task.read_text().split()]
    return sorted(found)


def affinity(label: str, pids: Sequence[int], expected: frozenset[int] | None) -> list[str]:
    """One line per process: its name, ``Cpus_allowed_list`` and its threads' lists (from
    /proc). With ``expected``, SystemExit if any process or thread may run elsewhere."""
    lines = []
    for pid in pids:
        try:
            status = _status(Path(f"/proc/{pid}/status"))
            threads: dict[str, int] = {}
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    allowed = _status(task / "status")["Cpus_allowed_list"]
                    threads[allowed] = threads.get(allowed, 0) + 1
        except OSError:
            continue  # exited meanwhile
        shown = ", ".join(f"{n} on {cpus}" for cpus, n in sorted(threads.items()))
        line = (
            f"{label} pid {pid} ({status['Name']}): Cpus_allowed_list "
            f"{status['Cpus_allowed_list']}; threads {shown}"
        )
        lines.append(line)
        if expected is not None:
            stray = [
                c for c in [status["Cpus_allowed_list"], *threads] if parse_cpu_list(c) - expected
            ]
            if stray:
                raise SystemExit(
                    f"pinning did not take: {line} (expected {format_cpu_list(expected)})"
                )
    if not lines:
        raise SystemExit(f"{label}: no live process to check")
    return lines


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time (s) the live processes ``pids`` used so far (threads included)."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = _stat_fields(pid)
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return ticks / os.sysconf("SC_CLK_TCK")
