"""Does a program come back after a wait? Learned per (program kind, wait name).

Each finished wait is resolved once: **returned** when the thread's next call arrives (or it
starts another wait), **ended** when the program ends first. The estimate is the posterior
mean of a Beta(``prior_returned``, ``prior_ended``) prior updated with the counts, so it starts
optimistic (agents usually do come back after a tool) and follows what it sees. Pure.
"""

from __future__ import annotations

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey

__all__ = ["ReturnModel"]


class ReturnModel:
    """Return counts per key, and the waits not yet resolved."""

    def __init__(self, *, prior_returned: float = 4.0, prior_ended: float = 1.0) -> None:
        if not (prior_returned > 0 and prior_ended > 0):
            raise ConfigError("return-probability priors must be > 0")
        self.prior_returned = float(prior_returned)
        self.prior_ended = float(prior_ended)
        #: key -> [returned, ended]
        self._counts: dict[str, list[int]] = {}
        #: program -> thread id -> key of its open or finished-but-unresolved wait
        self._pending: dict[ProgramKey, dict[str, str]] = {}

    def probability(self, key: str) -> float:
        """P(return) for ``key`` (0..1)."""
        returned, ended = self._counts.get(key, (0, 0))
        a, b = self.prior_returned + returned, self.prior_ended + ended
        return a / (a + b)

    def counts(self, key: str) -> tuple[int, int]:
        """(returned, ended) seen for ``key``."""
        returned, ended = self._counts.get(key, (0, 0))
        return returned, ended

    def wait_started(self, program: ProgramKey, thread_id: str, key: str) -> None:
        """A wait began; an earlier unresolved wait of the thread counts as returned."""
        self._resolve(program, thread_id, returned=True)
        self._pending.setdefault(program, {})[thread_id] = key

    def call_arrived(self, program: ProgramKey, thread_id: str) -> None:
        """The thread sent its next call: its wait (if any) returned."""
        self._resolve(program, thread_id, returned=True)

    def program_ended(self, program: ProgramKey) -> None:
        """The program ended: its unresolved waits did not return."""
        for key in self._pending.pop(program, {}).values():
            self._counts.setdefault(key, [0, 0])[1] += 1

    def _resolve(self, program: ProgramKey, thread_id: str, *, returned: bool) -> None:
        threads = self._pending.get(program)
        if not threads:
            return
        key = threads.pop(thread_id, None)
        if not threads:
            del self._pending[program]
        if key is not None:
            self._counts.setdefault(key, [0, 0])[0 if returned else 1] += 1
