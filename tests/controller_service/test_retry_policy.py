"""The engine's retry policy (service/core/retry.py): which backend failures send a call
elsewhere."""

from __future__ import annotations

import pytest

from agentrt_controller.backends.api import (
    BackendDisconnected,
    BackendError,
    BackendUnavailable,
    PinError,
)
from agentrt_controller.service.core.retry import RetryPolicy


@pytest.mark.parametrize(
    ("failure", "retryable", "proves_down"),
    [
        (BackendUnavailable("refused"), True, True),
        (BackendUnavailable("read timeout", connect_failed=False), True, False),
        (BackendDisconnected("closed before the first chunk"), True, False),
        (BackendError("malformed answer"), False, False),
        (PinError("no such pin"), False, False),
    ],
)
def test_failures(failure: BackendError, retryable: bool, proves_down: bool) -> None:
    policy = RetryPolicy(max_retries=2)
    assert policy.retryable(failure) is retryable
    assert policy.proves_down(failure) is proves_down


@pytest.mark.parametrize(("max_retries", "retries", "allowed"), [(0, 0, False), (2, 1, True),
                                                                 (2, 2, False)])  # fmt: skip
def test_retries_are_bounded(max_retries: int, retries: int, allowed: bool) -> None:
    assert RetryPolicy(max_retries).may_retry(retries) is allowed
