"""The journal's tables: SQLAlchemy Core, one module, shared by SQLite and PostgreSQL.

Timestamps are Unix epoch seconds (float, wall clock of the writer). Every table name starts
with ``agentrt_journal_`` so that the journal can live inside a user's own database; on
PostgreSQL the tables can also be put into a schema of their own (``Journal(schema=...)``).

``SCHEMA_VERSION`` is the version these definitions describe; ``migrations`` brings an older
database up to it and refuses a newer one.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

__all__ = ["SCHEMA_VERSION", "leases", "metadata", "steps", "tool_durations", "version_table"]

#: Version of the schema described in this module (see ``migrations.MIGRATIONS``).
SCHEMA_VERSION = 2

metadata = MetaData()

#: Exactly one row (id = 1): the schema version the database is at.
version_table = Table(
    "agentrt_journal_version",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    #: Schema version (an entry of ``migrations.MIGRATIONS``).
    Column("version", Integer, nullable=False),
    #: When the database was created / last migrated (epoch seconds).
    Column("updated_at", Float, nullable=False),
)

#: One row per step (tool call or LLM call) of a program, keyed by its position.
steps = Table(
    "agentrt_journal_steps",
    metadata,
    Column("program_id", String(255), primary_key=True),
    #: Deterministic thread id given by the SDK (``"main"``, ``"main.0"``, ...).
    Column("thread_id", String(255), primary_key=True),
    #: 0-based position of the step in its thread.
    Column("seq", Integer, primary_key=True, autoincrement=False),
    #: ``"tool"`` or ``"llm"``.
    Column("kind", String(16), nullable=False),
    #: Tool name or model name.
    Column("name", String(255), nullable=False),
    #: SHA-256 (hex) of the canonical JSON of the step's arguments.
    Column("args_hash", String(64), nullable=False),
    #: The idempotency key handed to the tool (see ``keys.idempotency_key``).
    Column("step_key", String(80), nullable=False, unique=True),
    #: ``STARTED``, ``COMMITTED`` or ``FAILED`` (``records.StepStatus``).
    Column("status", String(16), nullable=False),
    Column("side_effect", Boolean, nullable=False),
    Column("idempotent", Boolean, nullable=False),
    #: How many times the step was started (1 on the first run).
    Column("attempts", Integer, nullable=False),
    #: The SDK's node id (informational).
    Column("node_id", String(255), nullable=False),
    #: JSON of the result once COMMITTED.
    Column("result_json", Text, nullable=True),
    #: Error class name and message of the last failure (or of a result that could not be
    #: stored, on a row left STARTED).
    Column("error_type", String(255), nullable=True),
    Column("error_message", Text, nullable=True),
    #: Random id of the Journal instance that wrote the row last (which process / run).
    Column("owner", String(64), nullable=False),
    #: First recording of the step, start of the current attempt, last change (epoch seconds).
    Column("created_at", Float, nullable=False),
    Column("started_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    #: Wall time of the last finished attempt (seconds), NULL while STARTED.
    Column("duration_s", Float, nullable=True),
)
Index("agentrt_journal_steps_updated", steps.c.updated_at)
Index("agentrt_journal_steps_status", steps.c.status, steps.c.program_id)

#: Observed tool durations, the most recent ``keep`` rows per tool (older ones are trimmed).
tool_durations = Table(
    "agentrt_journal_tool_durations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tool_name", String(255), nullable=False),
    #: Observed wall time of one run (seconds).
    Column("duration_s", Float, nullable=False),
    #: When it was observed (epoch seconds).
    Column("observed_at", Float, nullable=False),
)
Index("agentrt_journal_tool_durations_tool", tool_durations.c.tool_name, tool_durations.c.id)

#: One row per program that was ever leased (schema version 2): who may write its steps now.
#: A lease is live while ``expires_at`` is in the future (the writer's wall clock); the holder
#: renews it, a runner finding it expired takes it over and increments ``epoch``. Every step
#: write of a leased run is conditional on ``(owner, epoch)`` still being this row's (fencing).
leases = Table(
    "agentrt_journal_leases",
    metadata,
    Column("program_id", String(255), primary_key=True),
    #: Random id of the holding Journal (one per runtime); compared by the fence.
    Column("owner", String(64), nullable=False),
    #: For people: ``host:pid/owner`` of the holder.
    Column("holder", String(255), nullable=False),
    #: Fencing token: +1 on every acquisition and every operator break, never decreases.
    Column("epoch", Integer, nullable=False),
    #: Lease length the holder asked for (seconds).
    Column("ttl_s", Float, nullable=False),
    #: Epoch seconds: acquisition by this holder, last renewal, expiry (0: released / broken).
    Column("acquired_at", Float, nullable=False),
    Column("renewed_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)
