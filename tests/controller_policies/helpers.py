"""Small builders shared by the policy tests."""

from __future__ import annotations

import itertools
from typing import Any

from agentrt_controller.scheduling.api import Call

_ids = itertools.count()


def make_call(program_id: str, now_s: float = 0.0, **fields: Any) -> Call:
    """A call of ``program_id`` arriving at ``now_s`` with a fresh id (``fields`` override)."""
    number = next(_ids)
    values: dict[str, Any] = {"call_id": f"c{number}", "node_id": f"n{number}"}
    values.update(fields)
    return Call(program_id=program_id, arrival_s=now_s, **values)
