"""An untagged call's one-call program ends without retention's fan-out while nothing is
retained anywhere (``RetentionDriver.retains()``), and through it while something is: the
program leaves the process table either way. On a fake clock, through the facade as the HTTP
layer calls it."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from agentrt_controller.keys import ProgramKey
from agentrt_controller.service.config import ControllerConfig
from agentrt_controller.service.core.facade import ControllerCore
from tests.controller_service.fake_core import running_core, untagged

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def _core() -> AbstractAsyncContextManager[ControllerCore]:
    """A running core with one fake backend and retention on."""
    return running_core(ControllerConfig(policy="plas", scrape_interval_s=3600.0, retention="on"))


async def _run_one_call(core: ControllerCore, call_id: str) -> ProgramKey:
    pending = untagged(core, call_id)
    core.calls.submit(pending)
    admission = await core.calls.admitted(pending)
    assert pending.call.program in core.dispatcher.table
    core.calls.finish(admission.call, admission.backend_id, 0.1, ok=True)
    core.call_ended(pending)
    return pending.call.program


@pytest.mark.parametrize("retains", [False, True], ids=["nothing-retained", "something-retained"])
async def test_the_one_call_program_ends_and_reaches_retention_only_while_it_retains(
    retains: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _core() as core:
        retention = core.retention
        assert retention is not None
        told: list[ProgramKey] = []
        monkeypatch.setattr(retention, "on_program_end", told.append)
        if retains:
            monkeypatch.setattr(retention.driver, "retains", lambda: True)
        key = await _run_one_call(core, "c1")
        assert retention.driver.retains() is retains
        assert key not in core.dispatcher.table  # it ended either way
        assert told == ([key] if retains else [])
