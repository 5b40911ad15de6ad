"""Memory parked in retention stays within the tenant's budget, over real HTTP.

A controller child process (``--retention on``, a small ``kept_bytes_per_tenant``) in front of
an emulator; one tagged program whose 40 threads each make a call carrying a 4 MiB field the
backend ignores (docs/security.md, "Memory parked in retention"). Retention keeps only the
prompts (never the bodies), within the budget — the oldest are dropped — and the controller's
resident memory does not grow with the bodies (before the fix: +~170 MB here). A kept prompt
still pins on the emulator; a dropped one leaves its thread a window-only retention. With two
tenants (API keys), one tenant's prompts never push out the other's.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from agentrt.protocol import EVENTS_PREFIX
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.server import EmulatorConfig, serve_engine
from tests.ops.processes import controller_process
from tests.security.measure_retention import (
    PIN_EVERY_WAIT,
    PROGRAM,
    SESSION,
    park_bodies,
    retention_snapshot,
    rss_mb,
    thread_messages,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

CALLS = 40
IGNORED_BYTES = 4 * 2**20
#: Room for about 25 of the 40 threads' prompts (each ~4 KB).
BUDGET = 100_000


async def _pins(http: httpx.AsyncClient, engine_url: str) -> list[dict[str, Any]]:
    pins: list[dict[str, Any]] = (await http.get(engine_url + "/agentrt/engine/v1/pins")).json()[
        "pins"
    ]
    return pins


async def test_retention_keeps_prompts_within_the_budget_not_bodies() -> None:
    options = {**PIN_EVERY_WAIT, "kept_bytes_per_tenant": BUDGET}
    async with (
        serve_engine(EmulatorConfig(time_scale=1000.0)) as engine,
        controller_process(
            [engine.base_url], "--retention", "on", "--retention-options", json.dumps(options)
        ) as (process, url),
        httpx.AsyncClient(timeout=30) as http,
    ):
        await park_bodies(http, url, calls=1, ignored_bytes=1024)  # warm: imports, pools
        before = rss_mb(process.pid)
        await park_bodies(http, url, calls=CALLS, ignored_bytes=IGNORED_BYTES)
        grown = rss_mb(process.pid) - before

        retention = await retention_snapshot(http, url)
        one_prompt = len(json.dumps(thread_messages(CALLS - 1)))
        assert BUDGET - one_prompt < retention["kept_bytes"] <= BUDGET
        assert retention["kept_bytes_per_tenant"] == BUDGET
        assert retention["counts"]["kept_dropped"] >= CALLS - BUDGET // one_prompt
        # 40 x 4 MiB went through; what stays is the allocator's high-water mark, not bodies.
        assert grown < CALLS * IGNORED_BYTES / 2**20 / 2, f"controller RSS grew {grown:.0f} MB"

        # The newest thread's prompt is kept and pins; the oldest's was dropped: window only.
        events = f"{url}{EVENTS_PREFIX}/programs/{PROGRAM}/tool-start"
        for thread in (0, CALLS - 1):
            wait = {"session_id": SESSION, "thread_id": f"t{thread}", "node_id": f"w{thread}",
                    "tool_name": "search", "predicted_duration_s": 60.0}  # fmt: skip
            assert (await http.post(events, json=wait)).status_code == 200
        with anyio.fail_after(10):
            while len(await _pins(http, engine.base_url)) < 1:  # noqa: ASYNC110 - another server
                await anyio.sleep(0.02)
        retention = await retention_snapshot(http, url)
        assert retention["retained"] == 2
        assert retention["counts"]["pins"] == 1
        assert len(await _pins(http, engine.base_url)) == 1


KEYS = "alice=key-alice-0001,bob=key-bob-0002"
ALICE = {"authorization": "Bearer key-alice-0001"}
BOB = {"authorization": "Bearer key-bob-0002"}


async def test_one_tenants_prompts_never_push_out_anothers() -> None:
    # Each thread's prompt is ~4 KB: Alice's two fit; Bob's 20 overflow his own budget only.
    options = {**PIN_EVERY_WAIT, "kept_bytes_per_tenant": 30_000}
    apps: list[ControllerApp] = []
    async with serve_engine(EmulatorConfig(time_scale=1000.0)) as engine:
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(engine.base_url, kind="emulator"),),
            api_keys=KEYS,
            retention="on",
            retention_options=options,
        )
        async with (
            serve_controller(config, on_app=apps.append) as url,
            httpx.AsyncClient(timeout=30) as http,
        ):
            await park_bodies(http, url, calls=2, ignored_bytes=1024, headers=ALICE)
            retention = apps[0].core.retention
            assert retention is not None
            alice = retention.driver.kept_bytes_of("alice")
            assert alice > 0
            await park_bodies(http, url, calls=20, ignored_bytes=1024, headers=BOB)
            assert 0 < retention.driver.kept_bytes_of("bob") <= 30_000
            assert retention.driver.kept_dropped > 0
            assert retention.driver.kept_bytes_of("alice") == alice

            # Alice's oldest thread still pins.
            wait = {"session_id": SESSION, "thread_id": "t0", "node_id": "w0",
                    "tool_name": "search", "predicted_duration_s": 60.0}  # fmt: skip
            events = f"{url}{EVENTS_PREFIX}/programs/{PROGRAM}/tool-start"
            assert (await http.post(events, json=wait, headers=ALICE)).status_code == 200
            with anyio.fail_after(10):
                while len(await _pins(http, engine.base_url)) < 1:  # noqa: ASYNC110 - another server
                    await anyio.sleep(0.02)
            assert retention.counts["pins"] == 1
