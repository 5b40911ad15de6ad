"""The lease queries (``agentrt_journal_leases``), on either store.

Every change is one conditional statement, so two runners can never both believe they hold a
lease: acquisition is ``INSERT … ON CONFLICT (program_id) DO UPDATE … WHERE expires_at <= now
OR owner = me RETURNING epoch`` (PostgreSQL locks the conflicting row and re-checks the
condition on its newest version; SQLite runs it under the database write lock), and renewal,
release and fencing compare ``(owner, epoch)``. Times are epoch seconds from the caller's clock
(see docs/journal.md on clock skew).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Update, or_, select, update

from agentrt.journal import schema
from agentrt.journal.leases import LeaseRecord, ProgramLease
from agentrt.journal.store import JournalStore, row_to_lease

__all__ = ["break_lease", "list_leases", "release", "renew", "try_acquire"]

_L = schema.leases


async def try_acquire(
    store: JournalStore, program_id: str, *, owner: str, holder: str, ttl_s: float, now: float
) -> tuple[ProgramLease | None, LeaseRecord | None]:
    """Take the lease if it is free, expired, released, or already ``owner``'s.

    Returns ``(lease, None)`` on success — the epoch is 1 for a program never leased, else the
    previous epoch + 1 — or ``(None, current)`` with the live lease of another holder.
    """
    insert = store._insert(_L).values(
        program_id=program_id,
        owner=owner,
        holder=holder,
        epoch=1,
        ttl_s=ttl_s,
        acquired_at=now,
        renewed_at=now,
        expires_at=now + ttl_s,
    )
    taken = {
        "owner": insert.excluded.owner,
        "holder": insert.excluded.holder,
        "epoch": _L.c.epoch + 1,
        "ttl_s": insert.excluded.ttl_s,
        "acquired_at": insert.excluded.acquired_at,
        "renewed_at": insert.excluded.renewed_at,
        "expires_at": insert.excluded.expires_at,
    }
    stmt: Any = insert.on_conflict_do_update(
        index_elements=[_L.c.program_id],
        set_=taken,
        where=or_(_L.c.expires_at <= now, _L.c.owner == owner),
    ).returning(_L.c.epoch)
    async with store._guard("acquire lease"), store._write() as conn:
        epoch = (await conn.execute(stmt)).scalar_one_or_none()
        current = None
        if epoch is None:
            row = (await conn.execute(select(_L).where(_L.c.program_id == program_id))).first()
            current = None if row is None else row_to_lease(row)
    if epoch is None:
        return None, current
    lease = ProgramLease(
        program_id,
        owner=owner,
        holder=holder,
        epoch=int(epoch),
        ttl_s=ttl_s,
        expires_at=now + ttl_s,
    )
    return lease, None


def _still_ours(lease: ProgramLease) -> Update:
    """An UPDATE of ``lease``'s row that matches only while the row is still this holder's:
    same owner, same epoch (no takeover or operator break since)."""
    return update(_L).where(
        _L.c.program_id == lease.program_id,
        _L.c.owner == lease.owner,
        _L.c.epoch == lease.epoch,
    )


async def renew(store: JournalStore, lease: ProgramLease, *, now: float) -> bool:
    """Extend ``lease`` to ``now + ttl_s``; ``False`` when it is no longer ours (taken over or
    broken). An expired lease that nobody took over is still ours: renewing it is safe."""
    stmt = _still_ours(lease).values(renewed_at=now, expires_at=now + lease.ttl_s)
    async with store._guard("renew lease"):
        ok = await store._write_one(stmt) == 1
    if ok:
        lease.expires_at = now + lease.ttl_s
    return ok


async def release(store: JournalStore, lease: ProgramLease, *, now: float) -> bool:
    """End ``lease`` (``expires_at = 0``: anyone may acquire at once); ``False`` when it was no
    longer ours. The epoch stays: the next holder gets epoch + 1."""
    stmt = _still_ours(lease).values(renewed_at=now, expires_at=0.0)
    async with store._guard("release lease"):
        return await store._write_one(stmt) == 1


async def break_lease(store: JournalStore, program_id: str, *, now: float) -> LeaseRecord | None:
    """Operator's break: the lease is released *and* its epoch incremented, so the old holder
    (if it still runs) is fenced at once. Returns the row as it was before, ``None`` when the
    program was never leased."""
    async with store._guard("break lease"), store._write() as conn:
        row = (await conn.execute(select(_L).where(_L.c.program_id == program_id))).first()
        if row is None:
            return None
        await conn.execute(
            update(_L)
            .where(_L.c.program_id == program_id)
            .values(epoch=_L.c.epoch + 1, renewed_at=now, expires_at=0.0)
        )
    return row_to_lease(row)


async def list_leases(
    store: JournalStore, program_ids: list[str] | None = None, *, limit: int = 50
) -> list[LeaseRecord]:
    """Lease rows (of ``program_ids``, else the most recently renewed ``limit``)."""
    stmt = select(_L).order_by(_L.c.renewed_at.desc(), _L.c.program_id)
    if program_ids is not None:
        stmt = stmt.where(_L.c.program_id.in_(program_ids))
    else:
        stmt = stmt.limit(limit)
    async with store._guard("read leases"), store._read() as conn:
        rows = (await conn.execute(stmt)).all()
    return [row_to_lease(row) for row in rows]
