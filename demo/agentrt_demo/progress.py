"""Progress of a running phase, on stderr: a live ``rich`` display on a terminal, a plain line
every few seconds otherwise (CI logs, pipes), or nothing."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from agentrt_demo.workload import ProgramSpec

__all__ = ["LiveProgress", "NullProgress", "PlainProgress", "ProgressSink", "make_progress"]

_PLAIN_EVERY_S = 3.0


class ProgressSink(Protocol):
    """Told about a phase as it runs (all calls from the event loop's thread)."""

    def phase_started(self, label: str, specs: Sequence[ProgramSpec]) -> None: ...
    def program_started(self, spec: ProgramSpec) -> None: ...
    def program_finished(self, spec: ProgramSpec, status: str) -> None: ...
    def phase_finished(self) -> None: ...


class NullProgress:
    def phase_started(self, label: str, specs: Sequence[ProgramSpec]) -> None:
        pass

    def program_started(self, spec: ProgramSpec) -> None:
        pass

    def program_finished(self, spec: ProgramSpec, status: str) -> None:
        pass

    def phase_finished(self) -> None:
        pass


class PlainProgress:
    """``controller: 12/45 programs done, 8 running, 3 not started (14.2 s)`` lines."""

    def __init__(self) -> None:
        self._label = ""
        self._total = 0
        self._started = 0
        self._done = 0
        self._failed = 0
        self._t0 = 0.0
        self._last = 0.0
        self._reported: tuple[int, int] | None = None

    def phase_started(self, label: str, specs: Sequence[ProgramSpec]) -> None:
        self._label, self._total = label, len(specs)
        self._started = self._done = self._failed = 0
        self._reported = None
        self._t0 = self._last = time.monotonic()
        kinds = Counter(s.kind for s in specs)
        mix = ", ".join(f"{n} {k}" for k, n in kinds.items())
        _say(f"{label}: {len(specs)} programs ({mix}) arriving over time")

    def program_started(self, spec: ProgramSpec) -> None:
        self._started += 1
        self._maybe_report()

    def program_finished(self, spec: ProgramSpec, status: str) -> None:
        self._done += 1
        self._failed += status != "ok"
        self._maybe_report()

    def phase_finished(self) -> None:
        if self._reported != (self._started, self._done):
            self._report()

    def _maybe_report(self) -> None:
        if time.monotonic() - self._last >= _PLAIN_EVERY_S:
            self._report()

    def _report(self) -> None:
        self._last = time.monotonic()
        self._reported = (self._started, self._done)
        failed = f", {self._failed} failed" if self._failed else ""
        _say(
            f"{self._label}: {self._done}/{self._total} programs done{failed}, "
            f"{self._started - self._done} running, {self._total - self._started} not started "
            f"({self._last - self._t0:.1f} s)"
        )


class LiveProgress:
    """A ``rich`` progress display: one bar per program kind plus the total."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description:<22}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[running]} running"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._tasks: dict[str, object] = {}
        self._running: Counter[str] = Counter()

    def phase_started(self, label: str, specs: Sequence[ProgramSpec]) -> None:
        kinds = Counter(s.kind for s in specs)
        self._running.clear()
        self._tasks = {
            "*": self._progress.add_task(f"[bold]{label}[/bold]", total=len(specs), running=0)
        }
        for kind, count in kinds.items():
            self._tasks[kind] = self._progress.add_task(f"  {kind}", total=count, running=0)
        self._progress.start()

    def program_started(self, spec: ProgramSpec) -> None:
        self._running[spec.kind] += 1
        self._running["*"] += 1
        self._update(spec.kind, 0)

    def program_finished(self, spec: ProgramSpec, status: str) -> None:
        self._running[spec.kind] -= 1
        self._running["*"] -= 1
        self._update(spec.kind, 1)

    def phase_finished(self) -> None:
        self._progress.stop()
        for task in self._tasks.values():
            self._progress.remove_task(task)  # type: ignore[arg-type]

    def _update(self, kind: str, advance: int) -> None:
        for key in (kind, "*"):
            task = self._tasks.get(key)
            if task is not None:
                self._progress.update(
                    task,  # type: ignore[arg-type]
                    advance=advance,
                    running=self._running[key],
                )


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def make_progress(mode: str) -> ProgressSink:
    """The display for ``mode`` (``auto``: live on a terminal, plain otherwise)."""
    if mode == "off":
        return NullProgress()
    if mode == "live" or (mode == "auto" and sys.stderr.isatty()):
        return LiveProgress()
    return PlainProgress()
