"""Locality-aware routing (Autellix arXiv 2502.13965, Algorithm 2; docs/routing.md): a filter →
scorer → picker pipeline of pure stages.

* :mod:`.api` — the :class:`~.api.Router` protocol and the one-method stage protocols;
  :mod:`.pipeline` — the router that runs them and enforces their contracts;
* :mod:`.filters`, :mod:`.scorers`, :mod:`.pickers` — the stages (and the model constraint
  every router applies first, :class:`~.filters.ModelFilter`);
* :mod:`.prefix_index` — the approximate per-backend prefix index; :mod:`.kv_index` — the
  exact one, fed by vLLM's KV-cache events where a backend publishes them; :mod:`.affinity` —
  program bindings with a TTL; :mod:`.hashing` — how drivers fill ``CallFacts.block_hashes``;
* :mod:`.round_robin` — ``round_robin``; :mod:`.routers` — ``least_loaded``, ``autellix``,
  ``prefix``; :mod:`.factory` —
  :func:`build_router` by name.

Nothing here awaits, does I/O or reads a clock: the controller service and the simulator drive
the same objects. docs/routing.md has the formulas and the measurements.
"""

from agentrt_controller.routing.factory import DEFAULT_ROUTER, ROUTER_NAMES, build_router
from agentrt_controller.routing.hashing import (
    message_block_hashes,
    request_block_hashes,
    token_block_hashes,
)
from agentrt_controller.routing.pipeline import uses_block_hashes

__all__ = [
    "DEFAULT_ROUTER",
    "ROUTER_NAMES",
    "build_router",
    "message_block_hashes",
    "request_block_hashes",
    "token_block_hashes",
    "uses_block_hashes",
]
