"""Program leases: plain data (what a lease row says, what a run holds, what a write carries).

A program id runs in one place at a time. The runner that starts (or resumes) a program takes
its **lease** in the journal — a row naming the holder, an expiry and an **epoch** — renews it
while the program runs and releases it at the end. A lease whose holder stopped renewing
(crashed, paused, partitioned) expires and may be taken over; the takeover increments the
epoch. Every step write of a leased run carries a :class:`Fence` and is refused unless its
``(owner, epoch)`` is still the lease's, so a zombie holder cannot record or start effects once
another runner took over (docs/journal.md, "Program leases").

No I/O here: ``lease_store`` holds the queries, ``leasing`` the acquire / renew / release
life cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentrt.errors import ConfigError

__all__ = ["DEFAULT_LEASE_TTL_S", "Fence", "LeaseRecord", "ProgramLease", "check_lease_ttl"]

#: Default lease length (seconds); the holder renews every third of it.
DEFAULT_LEASE_TTL_S = 30.0


def check_lease_ttl(ttl_s: float) -> float:
    """``ttl_s`` if it is a usable lease length (finite, > 0 seconds), else ``ConfigError``."""
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float):
        raise ConfigError(f"lease_ttl_s must be a number of seconds, got {ttl_s!r}")
    if not math.isfinite(ttl_s) or ttl_s <= 0:
        raise ConfigError(f"lease_ttl_s must be > 0 seconds, got {ttl_s}")
    return float(ttl_s)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One row of ``agentrt_journal_leases`` (see ``schema.leases``)."""

    program_id: str
    #: Random id of the holding journal (one per runtime).
    owner: str
    #: ``host:pid/owner``, for people.
    holder: str
    #: Fencing token: +1 on every acquisition and every operator break.
    epoch: int
    #: Lease length the holder asked for (seconds).
    ttl_s: float
    #: Epoch seconds.
    acquired_at: float
    renewed_at: float
    #: Epoch seconds; 0 when released or broken.
    expires_at: float

    def live(self, now: float) -> bool:
        """True while the lease blocks other runners (``now``: epoch seconds)."""
        return self.expires_at > now

    def state(self, now: float) -> str:
        """``held``, ``expired`` (the holder stopped renewing) or ``released``."""
        if self.expires_at == 0:
            return "released"
        return "held" if self.live(now) else "expired"


@dataclass(frozen=True, slots=True)
class Fence:
    """The condition a step write of one program carries (checked in the same statement).

    With ``epoch`` (a leased run): the write happens only while the program's lease row still
    has this ``owner`` and ``epoch``. Without (``epoch is None``, a run that holds no lease,
    e.g. ``Journal.run_step`` used directly or an operator's ``resolve``): the write happens
    only while nobody holds a live lease of the program at ``now``.
    """

    program_id: str
    owner: str
    epoch: int | None
    #: Epoch seconds, for the unleased check.
    now: float


class ProgramLease:
    """A lease this process holds (mutable: renewals move ``expires_at``).

    Obtained from :meth:`agentrt.journal.Journal.acquire_lease`; the journal renews it in the
    background every ``ttl_s / 3`` seconds and fences every step write of the program with it.
    """

    __slots__ = ("epoch", "expires_at", "holder", "lost_reason", "owner", "program_id", "ttl_s")

    def __init__(
        self,
        program_id: str,
        *,
        owner: str,
        holder: str,
        epoch: int,
        ttl_s: float,
        expires_at: float,
    ) -> None:
        self.program_id = program_id
        self.owner = owner
        self.holder = holder
        #: The fencing token of this holding.
        self.epoch = epoch
        #: Lease length (seconds).
        self.ttl_s = ttl_s
        #: Epoch seconds, as of the last successful acquisition or renewal.
        self.expires_at = expires_at
        #: Why the lease is gone (``None`` while held).
        self.lost_reason: str | None = None

    @property
    def lost(self) -> bool:
        """True once a renewal or a fenced write found the lease taken over or broken."""
        return self.lost_reason is not None

    def fence(self, now: float) -> Fence:
        """The condition this run's step writes carry."""
        return Fence(self.program_id, self.owner, self.epoch, now)

    def needs_renewal(self, now: float) -> bool:
        """True when fewer than ``ttl_s / 3`` seconds are left: a side effect must not start
        on a lease that could expire (and be taken over) while it runs."""
        return self.expires_at - now < self.ttl_s / 3

    def __repr__(self) -> str:
        state = "lost" if self.lost else f"expires_at={self.expires_at:.3f}"
        return f"ProgramLease({self.program_id!r}, epoch={self.epoch}, {state})"
