"""Per-tenant quotas on calls: sequences in flight and tokens per minute (docs/security.md,
"Quotas").

:class:`TenantQuotas` is private to
:class:`~agentrt_controller.service.core.facade.ControllerCore` and runs on the event loop's
thread. A call enters with :meth:`TenantQuotas.enter` before it is queued and leaves with
:meth:`TenantQuotas.leave` when its HTTP exchange is over; the tokens it was charged go to
:meth:`TenantQuotas.charge_tokens`. Over a quota, a tenant configured with ``over_quota =
"reject"`` gets :class:`QuotaExceeded` (HTTP 429 with ``Retry-After``); with ``"queue"`` the
call waits here until the tenant is under quota again (the call's deadline still applies: the
engine's deadline scope cancels the wait).

``max_in_flight`` counts sequences, not calls: a call with ``n`` = 8 holds 8 of it, as it holds
8 slots of a backend's batch (``CallFacts.sequences``). A call asking for more sequences than
the quota is refused with :class:`BadRequest` (400): it could never enter.

Tokens per minute is a token bucket holding at most one minute's worth, refilled continuously;
a call may enter while the bucket is above zero and its charge may take it below (the size of
an answer is known only afterwards), so a tenant overshoots by at most one round of calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from agentrt_controller.keys import ProgramKey
from agentrt_controller.process_table import ProcessTable
from agentrt_controller.service.core.clock import Clock
from agentrt_controller.service.core.tenants import Tenant
from agentrt_controller.service.errors import (
    BadRequest,
    ProgramNotFound,
    QuotaExceeded,
    TableFull,
)

# The errors live in the one tree (service/errors.py); named here too for old imports.
__all__ = ["ProgramNotFound", "QuotaExceeded", "TableFull", "TenantQuotas", "check_program"]


@dataclass(slots=True)
class _Ledger:
    """One tenant's live figures."""

    #: Sequences of the calls entered and not left (a call counts its ``n``).
    in_flight: int = 0
    #: Token bucket level (tokens) and when it was last refilled (seconds, engine clock).
    tokens: float = 0.0
    refilled_s: float = 0.0
    #: Set (and replaced) whenever a call leaves while some call waits on it.
    changed: anyio.Event = field(default_factory=anyio.Event)
    #: Calls waiting on :attr:`changed` (``queue`` mode): with none, a leaving call need not
    #: set and replace the event (an event made per call otherwise).
    waiting: int = 0


class TenantQuotas:
    """In-flight and token quotas by tenant name (see the module docstring)."""

    def __init__(self, clock: Clock, *, time_scale: float = 1.0) -> None:
        self.clock = clock
        #: The clock's seconds per wall second: a ``Retry-After`` is told in wall seconds.
        self.time_scale = time_scale
        self._ledgers: dict[str, _Ledger] = {}

    def _ledger(self, tenant: Tenant) -> _Ledger:
        ledger = self._ledgers.get(tenant.name)
        if ledger is None:
            per_minute = tenant.quota.tokens_per_minute
            ledger = _Ledger(tokens=float(per_minute or 0), refilled_s=self.clock())
            self._ledgers[tenant.name] = ledger
        return ledger

    def in_flight(self, tenant: Tenant) -> int:
        """Sequences of the calls of ``tenant`` entered and not left."""
        ledger = self._ledgers.get(tenant.name)
        return 0 if ledger is None else ledger.in_flight

    def _refill(self, tenant: Tenant, ledger: _Ledger) -> float:
        """Refill the bucket; returns the refill rate (tokens per second, 0 = no quota)."""
        per_minute = tenant.quota.tokens_per_minute
        if per_minute is None:
            return 0.0
        now = self.clock()
        rate = per_minute / 60.0
        ledger.tokens = min(float(per_minute), ledger.tokens + (now - ledger.refilled_s) * rate)
        ledger.refilled_s = now
        return rate

    def _blocked(self, tenant: Tenant, ledger: _Ledger, sequences: int) -> QuotaExceeded | None:
        quota = tenant.quota
        limit = quota.max_in_flight
        if limit is not None and ledger.in_flight + sequences > limit:
            return QuotaExceeded(
                f"tenant {tenant.name} has {ledger.in_flight} sequences in flight, its quota "
                f"is {limit} (this call asks for {sequences})",
                code="in_flight_quota",
                retry_after_s=1,
            )
        rate = self._refill(tenant, ledger)
        if rate > 0 and ledger.tokens <= 0:
            return QuotaExceeded(
                f"tenant {tenant.name} used its {quota.tokens_per_minute} tokens per minute",
                code="tokens_per_minute_quota",
                retry_after_s=(1.0 - ledger.tokens) / rate / self.time_scale,
            )
        return None

    async def enter(self, tenant: Tenant, sequences: int = 1) -> None:
        """Count a call of ``sequences`` sequences (>= 1) in, or raise :class:`QuotaExceeded`
        (``reject``), or wait until the tenant is under quota (``queue``; cancellable).
        Raises :class:`BadRequest` when ``sequences`` alone is above ``max_in_flight``."""
        limit = tenant.quota.max_in_flight
        if limit is not None and sequences > limit:
            raise BadRequest(
                f"the call asks for {sequences} sequences ('n' / 'best_of'); tenant "
                f"{tenant.name}'s max_in_flight quota is {limit} sequences",
                param="n",
            )
        ledger = self._ledger(tenant)
        while (blocked := self._blocked(tenant, ledger, sequences)) is not None:
            if tenant.quota.over_quota == "reject":
                raise blocked
            # Wait for a call to leave, or for the bucket to refill (Retry-After's estimate).
            ledger.waiting += 1
            try:
                with anyio.move_on_after(blocked.retry_after_s):
                    await ledger.changed.wait()
            finally:
                ledger.waiting -= 1
        ledger.in_flight += sequences

    def leave(self, tenant: Tenant, sequences: int = 1) -> None:
        """A call of ``sequences`` sequences that entered is over."""
        ledger = self._ledger(tenant)
        ledger.in_flight = max(0, ledger.in_flight - sequences)
        if ledger.waiting:
            ledger.changed.set()
            ledger.changed = anyio.Event()

    def charge_tokens(self, tenant: Tenant, tokens: int) -> None:
        """Take ``tokens`` (prompt + output of a finished call) from the tenant's bucket.
        The output of a call with ``n`` > 1 is already the sum over its choices (the usage's
        ``completion_tokens``, or every streamed chunk): it is not multiplied again."""
        if tenant.quota.tokens_per_minute is None or tokens <= 0:
            return
        ledger = self._ledger(tenant)
        self._refill(tenant, ledger)
        ledger.tokens -= tokens


def check_program(
    table: ProcessTable,
    key: ProgramKey,
    tenant: Tenant,
    now_s: float,
    *,
    max_programs: int,
    retry_after_s: int,
    time_scale: float = 1.0,
) -> ProgramKey | None:
    """May a call or event of ``key`` go on? For a new program: under the tenant's
    ``max_programs`` (else :class:`QuotaExceeded`) and room in the table, which may need the
    returned idle program evicted (the caller ends it) or raise :class:`TableFull`. For a live
    program: under the tenant's ``max_program_wall_s`` (else :class:`QuotaExceeded`, whose
    ``Retry-After`` is the table's idle timeout in wall seconds: ``time_scale`` of the clock's
    seconds each)."""
    quota = tenant.quota
    entry = table.get(key)
    if entry is not None:
        wall = quota.max_program_wall_s
        if wall is not None and now_s - entry.created_s > wall:
            raise QuotaExceeded(
                f"program {key.program_id} ran past tenant {tenant.name}'s wall-time quota of "
                f"{wall:g} s",
                code="program_wall_time_quota",
                retry_after_s=table.idle_timeout_s / time_scale,
            )
        return None
    if quota.max_programs is not None and table.programs_of(key.tenant) >= quota.max_programs:
        raise QuotaExceeded(
            f"tenant {tenant.name} has {quota.max_programs} live programs, its quota",
            code="programs_quota",
            retry_after_s=retry_after_s,
        )
    if len(table) < max_programs:
        return None
    victim = table.evictable()
    if victim is None:
        raise TableFull(
            f"the controller holds {len(table)} programs (max_programs) and none is idle",
            retry_after_s=retry_after_s,
        )
    return victim
