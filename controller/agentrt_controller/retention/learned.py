"""Where the retention policy keeps what it learns from traffic: per tenant, bounded.

Tool durations (:mod:`.durations`) and return counts (:mod:`.returns`) are learned per
**(tenant, name)**, never per name alone: a tenant that sends waits under another tenant's
program and tool names learns only for itself (docs/security.md, "Shared learned
statistics"). The tenant is :attr:`ProgramKey.tenant <agentrt_controller.keys.ProgramKey>`;
``None`` (the simulator) is one tenant like any other.

Bounds, so that client-chosen names cannot grow memory without end:

* at most ``max_names_per_tenant`` names per tenant: a tenant's least recently written name is
  forgotten first, so a tenant inventing names only pushes out its own;
* at most ``max_names`` (tenant, name) entries in all: beyond it, the least recently written
  name of the tenant holding the most names is forgotten (the biggest tenant pays, and none
  is pushed below its fair part by a smaller one).

A forgotten name starts again from the prior. The global prior (``share_statistics`` in the
tenants file, docs/tenancy.md) is a separate :class:`BoundedNames` fed only by the tenants that
opt in. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from agentrt.errors import ConfigError

__all__ = ["BoundedNames", "TenantTables"]

V = TypeVar("V")

#: Default caps (also :class:`~agentrt_controller.retention.policy.RetentionConfig`'s).
MAX_NAMES_PER_TENANT = 256
MAX_NAMES = 4096


class BoundedNames(Generic[V]):
    """Values by name, at most ``capacity`` of them; the least recently written goes first."""

    def __init__(self, make: Callable[[], V], capacity: int) -> None:
        if capacity < 1:
            raise ConfigError("a learned-statistics table needs a capacity >= 1")
        self._make = make
        self.capacity = capacity
        self._values: OrderedDict[str, V] = OrderedDict()

    def get(self, name: str) -> V | None:
        """The value of ``name`` (``None`` = never written, or forgotten); does not refresh it."""
        return self._values.get(name)

    def write(self, name: str) -> V:
        """The value of ``name`` to update, created if needed; it becomes the newest."""
        value = self._values.get(name)
        if value is not None:
            self._values.move_to_end(name)
            return value
        if len(self._values) >= self.capacity:
            self._values.popitem(last=False)
        value = self._values[name] = self._make()
        return value

    def forget_oldest(self) -> None:
        """Drop the least recently written name (none: no-op)."""
        if self._values:
            self._values.popitem(last=False)

    def __len__(self) -> int:
        return len(self._values)


class TenantTables(Generic[V]):
    """Values per (tenant, name) under the two caps of the module docstring."""

    def __init__(
        self,
        make: Callable[[], V],
        *,
        max_names_per_tenant: int = MAX_NAMES_PER_TENANT,
        max_names: int = MAX_NAMES,
    ) -> None:
        if max_names_per_tenant < 1 or max_names < 1:
            raise ConfigError("learned-statistics caps must be >= 1")
        self._make = make
        self.max_names_per_tenant = max_names_per_tenant
        self.max_names = max_names
        self._tables: dict[str | None, BoundedNames[V]] = {}
        self._size = 0

    def get(self, tenant: str | None, name: str) -> V | None:
        """``tenant``'s value of ``name``; ``None`` = nothing learned (or forgotten)."""
        table = self._tables.get(tenant)
        return table.get(name) if table is not None else None

    def write(self, tenant: str | None, name: str) -> V:
        """``tenant``'s value of ``name`` to update, created (within the caps) if needed."""
        table = self._tables.get(tenant)
        if table is None:
            table = self._tables[tenant] = BoundedNames(self._make, self.max_names_per_tenant)
        elif table.get(name) is not None:
            return table.write(name)
        if len(table) < table.capacity and self._size >= self.max_names:
            self._forget_from_biggest()
            self._size -= 1
            self._tables.setdefault(tenant, table)  # it may have been the biggest, emptied
        before = len(table)
        value = table.write(name)
        self._size += len(table) - before
        return value

    def _forget_from_biggest(self) -> None:
        tenant = max(self._tables, key=lambda t: len(self._tables[t]))
        biggest = self._tables[tenant]
        biggest.forget_oldest()
        if not biggest:
            del self._tables[tenant]

    @property
    def tenants(self) -> int:
        """Tenants with at least one name."""
        return sum(1 for table in self._tables.values() if table)

    def __len__(self) -> int:
        """(tenant, name) entries held."""
        return self._size
