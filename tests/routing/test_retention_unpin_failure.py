"""A retention unpin that fails because its backend stopped, over real HTTP: one warning line
with the reason (no traceback), counted as a retention error
(``agentrt_controller_retention_errors_total{action="unpin"}``), not as an internal error."""

from __future__ import annotations

import contextlib
import logging

import anyio
import httpx
import pytest

from agentrt.protocol import EVENTS_PREFIX, CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.server import (
    DEFAULT_MODEL_NAME,
    EmulatorConfig,
    serve_engine_in_thread,
)
from tests.security.measure_retention import PIN_EVERY_WAIT, thread_messages
from tests.security.stack import captured_logs

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SESSION = "s"


async def test_a_failed_unpin_is_one_warning_and_a_retention_error() -> None:
    apps: list[ControllerApp] = []
    with contextlib.ExitStack() as engine_stack:  # the engine on its own loop: stoppable first
        engine = engine_stack.enter_context(serve_engine_in_thread(EmulatorConfig()))
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(engine.base_url, kind="emulator"),),
            retention="on",
            retention_options=PIN_EVERY_WAIT,
            scrape_interval_s=0.2,
        )
        with captured_logs() as logs:
            async with (
                serve_controller(config, on_app=apps.append) as url,
                httpx.AsyncClient(timeout=20) as http,
            ):
                events = url + EVENTS_PREFIX + "/programs/p"
                await http.post(events + "/start", json={"session_id": SESSION, "name": "x"})
                tags = CallTags(session_id=SESSION, program_id="p", thread_id="main",
                                node_id="c0")  # fmt: skip
                body = {"model": DEFAULT_MODEL_NAME, "messages": thread_messages(0),
                        "max_tokens": 2}  # fmt: skip
                answer = await http.post(
                    url + "/v1/chat/completions", json=body, headers=tags.to_headers()
                )
                assert answer.status_code == 200
                wait = {"session_id": SESSION, "thread_id": "main", "node_id": "t1",
                        "tool_name": "search", "predicted_duration_s": 5.0}  # fmt: skip
                assert (await http.post(events + "/tool-start", json=wait)).status_code == 200
                retention = apps[0].core.retention
                assert retention is not None
                with anyio.fail_after(10):
                    while retention.counts.get("pins") != 1:  # noqa: ASYNC110 - the executor's loop
                        await anyio.sleep(0.02)

                # The backend stops while the pin is held.
                await anyio.to_thread.run_sync(engine_stack.close)
                ended = await http.post(events + "/end", json={"session_id": SESSION})
                assert ended.status_code == 200
                with anyio.fail_after(10):
                    while retention.counts.get("errors") != 1:  # noqa: ASYNC110 - the executor's loop
                        await anyio.sleep(0.02)
                metrics = (await http.get(url + "/metrics")).text

    failed = [r for r in logs.records if r.getMessage().startswith("retention unpin")]
    assert len(failed) == 1, [r.getMessage() for r in logs.records]
    record = failed[0]
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    message = record.getMessage()
    assert "\n" not in message
    assert "failed: " in message and message.split("failed: ", 1)[1].strip()  # a reason
    assert 'agentrt_controller_retention_errors_total{action="unpin"} 1.0' in metrics
    assert "agentrt_controller_internal_errors_total 0.0" in metrics
