"""The backends that may take a call during one admission round, as one changing object.

:meth:`~agentrt_controller.scheduling.dispatcher.Dispatcher.admit` asks the admission policy
which backends have room, then admits call after call; after each one only the chosen backend
changed (one more call in flight, maybe no room left). A :class:`CandidateSet` carries that
round's candidates to the router and says what changed since the router last looked
(:attr:`CandidateSet.changes`), so a router may keep derived state — e.g. the candidates
ordered by load — and bring it up to date in O(changes) instead of rebuilding it per call
(docs/routing.md, "Cost at many backends"). To everything else it is a plain, read-only
sequence of :class:`~agentrt_controller.scheduling.api.BackendView` in the driver's order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import overload

from agentrt_controller.scheduling.api import BackendView

__all__ = ["CandidateSet"]


class CandidateSet(Sequence[BackendView]):
    """Candidate backends by id, in the order given; changed only through :meth:`update`
    and :meth:`remove`, each of which appends the backend's id to :attr:`changes`."""

    __slots__ = ("_listed", "_views", "changes")

    def __init__(self, views: Iterable[BackendView]) -> None:
        """``views``: one per backend (a later view of the same id replaces an earlier one)."""
        self._views: dict[str, BackendView] = {v.backend_id: v for v in views}
        self._listed: list[BackendView] | None = None
        #: Ids of the backends changed since construction, in order (append-only).
        self.changes: list[str] = []

    def get(self, backend_id: str) -> BackendView | None:
        """The candidate with that id, or ``None`` when it is not one."""
        return self._views.get(backend_id)

    def update(self, view: BackendView) -> None:
        """Replace the candidate with ``view``'s id by ``view`` (it keeps its place).
        Raises ``KeyError`` when that backend is not a candidate."""
        if view.backend_id not in self._views:
            raise KeyError(view.backend_id)
        self._views[view.backend_id] = view
        self._listed = None
        self.changes.append(view.backend_id)

    def remove(self, backend_id: str) -> None:
        """The backend is no candidate any more (no room left). Raises ``KeyError`` when it
        was not one."""
        del self._views[backend_id]
        self._listed = None
        self.changes.append(backend_id)

    def __contains__(self, value: object) -> bool:
        if isinstance(value, BackendView):
            return self._views.get(value.backend_id) == value
        return False

    def __len__(self) -> int:
        return len(self._views)

    def __iter__(self) -> Iterator[BackendView]:
        return iter(self._views.values())

    @overload
    def __getitem__(self, index: int) -> BackendView: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[BackendView]: ...

    def __getitem__(self, index: int | slice) -> BackendView | Sequence[BackendView]:
        if self._listed is None:
            self._listed = list(self._views.values())
        return self._listed[index]

    def __repr__(self) -> str:
        return f"CandidateSet({sorted(self._views)!r})"
