"""``agentrt controller serve`` starts inside a Kubernetes pod next to a Service named
``agentrt-controller``, whose service-link variables share the controller's prefix."""

from __future__ import annotations

import os

import httpx
import pytest

from agentrt_emulator.server import EmulatorConfig, serve_engine
from tests.ops.processes import controller_process

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

#: What the kubelet injects for ``Service agentrt-controller`` (port 8000, named http).
SERVICE_LINKS = {
    "AGENTRT_CONTROLLER_SERVICE_HOST": "10.0.0.1",
    "AGENTRT_CONTROLLER_SERVICE_PORT": "8000",
    "AGENTRT_CONTROLLER_SERVICE_PORT_HTTP": "8000",
    "AGENTRT_CONTROLLER_PORT": "tcp://10.0.0.1:8000",
    "AGENTRT_CONTROLLER_PORT_8000_TCP": "tcp://10.0.0.1:8000",
    "AGENTRT_CONTROLLER_PORT_8000_TCP_PROTO": "tcp",
    "AGENTRT_CONTROLLER_PORT_8000_TCP_PORT": "8000",
    "AGENTRT_CONTROLLER_PORT_8000_TCP_ADDR": "10.0.0.1",
}


async def test_the_controller_starts_with_the_kubernetes_variables_and_answers_probes() -> None:
    env = {**os.environ, **SERVICE_LINKS, "AGENTRT_CONTROLLER_NOT_A_SETTING": "x"}
    async with (
        serve_engine(EmulatorConfig()) as engine,
        controller_process([engine.base_url], env=env) as (_process, url),
        httpx.AsyncClient() as http,
    ):
        # controller_process waited for /readyz 200: the --port flag won, the links were ignored.
        live = await http.get(url + "/livez")
        ready = await http.get(url + "/readyz")
    assert live.status_code == 200
    assert live.json()["status"] == "ok"
    assert ready.status_code == 200
    assert ready.json()["backends"]
