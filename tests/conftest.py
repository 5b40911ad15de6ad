"""Shared pytest fixtures. Async tests use anyio's plugin on asyncio."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
