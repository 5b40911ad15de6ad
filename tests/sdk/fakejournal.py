"""An in-memory StepJournal for SDK tests (the real one lives in agentrt.journal)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from agentrt.errors import NonDeterminismError, UnknownOutcome
from agentrt.journal.api import Execute, Reconcile, StepSpec


@dataclass
class Record:
    name: str
    arguments: str
    status: str  # STARTED, COMMITTED, FAILED
    result: Any = None


@dataclass
class MemoryJournal:
    records: dict[tuple[str, str, int], Record] = field(default_factory=dict)
    specs: list[StepSpec] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    durations: dict[str, list[float]] = field(default_factory=dict)
    #: Simulate a crash right after the effect: STARTED stays, the result is lost.
    crash_after_execute: bool = False

    async def run_step(
        self, step: StepSpec, execute: Execute, *, reconcile: Reconcile | None = None
    ) -> Any:
        self.specs.append(step)
        position = (step.program_id, step.thread_id, step.seq)
        args = json.dumps(step.arguments, sort_keys=True)
        key = hashlib.sha256(f"{position}".encode()).hexdigest()[:16]
        record = self.records.get(position)
        if record is not None:
            if (record.name, record.arguments) != (step.name, args):
                raise NonDeterminismError(f"different step at {position}")
            if record.status == "COMMITTED":
                return record.result
            if record.status == "STARTED" and step.side_effect and not step.idempotent:
                if reconcile is None:
                    raise UnknownOutcome("unknown outcome", key=key)
                found = await reconcile(key)
                if found.status == "done":
                    record.status, record.result = "COMMITTED", found.result
                    return found.result
                if found.status == "unknown":
                    raise UnknownOutcome("still unknown", key=key)
        record = Record(step.name, args, "STARTED")
        if step.side_effect:
            self.records[position] = record
        self.keys.append(key)
        result = await execute(key)
        if self.crash_after_execute and step.side_effect:
            raise RuntimeError("simulated crash after the effect")
        record.status, record.result = "COMMITTED", result
        self.records[position] = record
        return result

    async def record_tool_duration(self, tool_name: str, duration_s: float) -> None:
        self.durations.setdefault(tool_name, []).append(duration_s)

    async def predict_tool_duration(self, tool_name: str) -> float | None:
        seen = self.durations.get(tool_name)
        return sum(seen) / len(seen) if seen else None
