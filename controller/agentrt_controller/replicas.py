"""Several controller replicas: which replica a request goes to (a pure balancer model).

Program-level scheduling needs every call of a program to meet the same process-table entry
(docs/scheduling.md, "Process table"), so a fleet of controller replicas must be sharded **by
program**: a load balancer in front of them hashes the program id (``X-Agentrt-Program``) to a
replica. A balancer that spreads requests **by call** (round robin) splits a program's calls,
tool events and retention over replicas, each of which then sees a fragment of the program.

* :class:`ConsistentHashRing` — a program id to one of N named replicas, with
  ``virtual_nodes`` points per replica on a 64-bit ring (Karger et al., STOC 1997). Removing a
  replica moves only the keys it held (about 1/N of them), to the other replicas; adding one
  takes about 1/(N+1) of the keys from the others. Points are BLAKE2b digests of
  ``"<replica>#<i>"`` and keys of their UTF-8 bytes: stable across processes and machines (not
  Python's salted ``hash``), so a table of program → replica can be computed offline, e.g. to
  check a balancer's configuration.
* :class:`ReplicaBalancer` — what the discrete-event simulator (docs/simulator.md, "Controller
  replicas") and tests use: ``shard="program"`` (the ring) or ``shard="call"`` (round robin
  over every request, the balancer's default and what breaks program-level scheduling).

Pure: no clock, no I/O, no randomness outside the digests.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from typing import Final

from agentrt.errors import ConfigError

__all__ = ["SHARD_MODES", "ConsistentHashRing", "ReplicaBalancer", "ring_hash"]

#: How a balancer spreads requests over replicas: by program id (consistent hash) or per
#: request (round robin).
SHARD_MODES: Final = ("program", "call")


def ring_hash(text: str) -> int:
    """A 64-bit position on the ring for ``text`` (BLAKE2b of its UTF-8 bytes; stable)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class ConsistentHashRing:
    """Keys to named replicas on a hash ring (module docstring).

    ``replicas``: distinct, non-empty names (at least one); ``virtual_nodes`` >= 1 points per
    replica — more points, better balance (160 points keep every replica within about ±15 %
    of its fair share of keys for up to 8 replicas). Raises :class:`ConfigError` otherwise.
    """

    def __init__(self, replicas: Iterable[str], *, virtual_nodes: int = 160) -> None:
        names = list(replicas)
        if not names:
            raise ConfigError("a consistent-hash ring needs at least one replica")
        if any(not isinstance(n, str) or not n for n in names):
            raise ConfigError(f"replica names must be non-empty strings, got {names!r}")
        if len(set(names)) != len(names):
            raise ConfigError(f"replica names must be distinct, got {names!r}")
        if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int):
            raise ConfigError(f"virtual_nodes must be an integer, got {virtual_nodes!r}")
        if virtual_nodes < 1:
            raise ConfigError(f"virtual_nodes must be >= 1, got {virtual_nodes}")
        self.virtual_nodes = virtual_nodes
        self.replicas: tuple[str, ...] = tuple(names)
        # Ties between two replicas' points (a 64-bit collision) go to the smaller name.
        points = sorted(
            (ring_hash(f"{name}#{i}"), name) for name in names for i in range(virtual_nodes)
        )
        self._positions = [p for p, _ in points]
        self._owners = [n for _, n in points]

    def replica_for(self, key: str) -> str:
        """The replica owning ``key``: the first point clockwise from the key's position."""
        index = bisect.bisect_left(self._positions, ring_hash(key))
        return self._owners[index if index < len(self._owners) else 0]

    def without(self, replica: str) -> ConsistentHashRing:
        """The ring after ``replica`` left (its keys move, nobody else's). Raises
        :class:`ConfigError` for an unknown name or the last replica."""
        if replica not in self.replicas:
            raise ConfigError(f"unknown replica {replica!r}; replicas: {list(self.replicas)}")
        return ConsistentHashRing(
            [n for n in self.replicas if n != replica], virtual_nodes=self.virtual_nodes
        )

    def with_replica(self, replica: str) -> ConsistentHashRing:
        """The ring after ``replica`` joined."""
        return ConsistentHashRing([*self.replicas, replica], virtual_nodes=self.virtual_nodes)


class ReplicaBalancer:
    """Which of ``count`` replicas (indices ``0 .. count-1``) serves a request.

    ``shard="program"``: :meth:`pick` returns the ring's replica for the program id, always
    the same one. ``shard="call"``: every :meth:`pick` is the next replica in turn (round
    robin over all requests, whatever their program). Raises :class:`ConfigError` for
    ``count`` < 1 or an unknown mode.
    """

    def __init__(self, count: int, shard: str = "program", *, virtual_nodes: int = 160) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ConfigError(f"the number of controller replicas must be >= 1, got {count!r}")
        if shard not in SHARD_MODES:
            raise ConfigError(f"unknown shard mode {shard!r}; valid: {', '.join(SHARD_MODES)}")
        self.count = count
        self.shard = shard
        names = replica_names(count)
        self._ring = ConsistentHashRing(names, virtual_nodes=virtual_nodes)
        self._index = {name: i for i, name in enumerate(names)}
        self._next = 0

    @property
    def by_program(self) -> bool:
        """Whether a program's requests all go to one replica."""
        return self.shard == "program"

    def pick(self, program_id: str) -> int:
        """The replica index for a request of ``program_id``."""
        if self.count == 1:
            return 0
        if self.shard == "program":
            return self._index[self._ring.replica_for(program_id)]
        chosen = self._next
        self._next = (chosen + 1) % self.count
        return chosen


def replica_names(count: int) -> Sequence[str]:
    """The names the simulator gives its replicas: ``controller-0`` ... ``controller-<N-1>``."""
    return [f"controller-{i}" for i in range(count)]
