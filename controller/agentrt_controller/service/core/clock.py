"""The controller's one clock.

Every time the service feeds a policy (arrivals, admissions, finishes, program events,
retention windows, circuit breakers) comes from one :data:`Clock` passed into
:class:`~agentrt_controller.service.core.facade.ControllerCore`, so a test can drive the whole
service on a fake clock and the pure policies never read one themselves (docs/architecture.md,
"Design rules", rule 1). Transport bookkeeping that decides nothing for a policy (the HTTP
pool's idle connections) keeps its own monotonic reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["MONOTONIC", "Clock"]

#: Seconds on a monotonic scale (any origin); only differences and comparisons mean anything.
Clock = Callable[[], float]

#: The service's default clock.
MONOTONIC: Clock = time.monotonic
