"""Does a program come back after a wait? Learned per tenant and (program kind, wait name).

Each finished wait is resolved once: **returned** when the thread's next call arrives (or it
starts another wait), **ended** when the program ends first. The counts are kept per
(tenant, key) (:mod:`.learned`: bounded, oldest forgotten), the tenant being the program's
(:attr:`ProgramKey.tenant <agentrt_controller.keys.ProgramKey>`), so a tenant whose programs
never come back under another tenant's names lowers only its own estimate. The estimate is
the posterior mean of a Beta(``prior_returned``, ``prior_ended``) prior updated with the
counts, so it starts optimistic (agents usually do come back after a tool) and follows what it
sees. A tenant with fewer than ``min_samples`` resolved waits of its own for a key adds the
**global prior** — the counts of the tenants that opted in to sharing (``sharing``) — to it
(a sharing tenant's own counts are in there already). Pure.
"""

from __future__ import annotations

from collections.abc import Collection

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention.learned import (
    MAX_NAMES,
    MAX_NAMES_PER_TENANT,
    BoundedNames,
    TenantTables,
)

__all__ = ["ReturnModel"]


def _zero() -> list[int]:
    return [0, 0]


class ReturnModel:
    """Return counts per (tenant, key), the shared prior per key, and the waits not yet
    resolved."""

    def __init__(
        self,
        *,
        prior_returned: float = 4.0,
        prior_ended: float = 1.0,
        min_samples: int = 3,
        sharing: Collection[str] = frozenset(),
        max_names_per_tenant: int = MAX_NAMES_PER_TENANT,
        max_names: int = MAX_NAMES,
    ) -> None:
        """``sharing``: the tenants whose counts feed the global prior."""
        if not (prior_returned > 0 and prior_ended > 0):
            raise ConfigError("return-probability priors must be > 0")
        if min_samples < 1:
            raise ConfigError("min_samples must be >= 1")
        self.prior_returned = float(prior_returned)
        self.prior_ended = float(prior_ended)
        self.min_samples = min_samples
        self.sharing = frozenset(sharing)
        #: (tenant, key) -> [returned, ended]
        self._counts: TenantTables[list[int]] = TenantTables(
            _zero, max_names_per_tenant=max_names_per_tenant, max_names=max_names
        )
        #: key -> [returned, ended] of the sharing tenants
        self._shared: BoundedNames[list[int]] = BoundedNames(_zero, max_names_per_tenant)
        #: program -> thread id -> key of its open or finished-but-unresolved wait
        self._pending: dict[ProgramKey, dict[str, str]] = {}

    def probability(self, key: str, *, tenant: str | None = None) -> float:
        """P(return) for ``tenant``'s waits of ``key`` (0..1)."""
        returned, ended = self.counts(key, tenant=tenant)
        if returned + ended < self.min_samples:
            shared_returned, shared_ended = self.shared_counts(key)
            if tenant is not None and tenant in self.sharing:
                returned, ended = shared_returned, shared_ended
            else:
                returned, ended = returned + shared_returned, ended + shared_ended
        a, b = self.prior_returned + returned, self.prior_ended + ended
        return a / (a + b)

    def counts(self, key: str, *, tenant: str | None = None) -> tuple[int, int]:
        """(returned, ended) seen for ``tenant``'s waits of ``key``."""
        returned, ended = self._counts.get(tenant, key) or (0, 0)
        return returned, ended

    def shared_counts(self, key: str) -> tuple[int, int]:
        """(returned, ended) of ``key`` in the shared prior."""
        returned, ended = self._shared.get(key) or (0, 0)
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
            self._count(program.tenant, key, returned=False)

    @property
    def learned(self) -> dict[str, int]:
        """Sizes for introspection: tenants, (tenant, key) entries, shared keys."""
        return {
            "tenants": self._counts.tenants,
            "names": len(self._counts),
            "shared_names": len(self._shared),
        }

    def _resolve(self, program: ProgramKey, thread_id: str, *, returned: bool) -> None:
        threads = self._pending.get(program)
        if not threads:
            return
        key = threads.pop(thread_id, None)
        if not threads:
            del self._pending[program]
        if key is not None:
            self._count(program.tenant, key, returned=returned)

    def _count(self, tenant: str | None, key: str, *, returned: bool) -> None:
        index = 0 if returned else 1
        self._counts.write(tenant, key)[index] += 1
        if tenant is not None and tenant in self.sharing:
            self._shared.write(key)[index] += 1
