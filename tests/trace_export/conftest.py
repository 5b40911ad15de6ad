"""One recorded SDK run shared by the module's tests (it takes a second or two)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from .recorded import RecordedRun, record_run


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    out_dir: Path = tmp_path_factory.mktemp("recorded")
    return anyio.run(record_run, out_dir)
