"""The demo's emulated cluster with several models: one engine per model in turn, behind the
demo's controller, which routes each call to an engine of its model (docs/routing.md,
"Several models")."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agentrt.errors import ConfigError
from agentrt_demo.cluster import controller_setup, run_controller, run_engines
from agentrt_demo.settings import DemoSettings

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

MODELS = ("org/planner-8b", "org/verifier-1b")


@pytest.mark.parametrize(
    ("models", "engines", "message"),
    [
        (("a", "a"), 2, "models must differ"),
        (("a", ""), 2, "models must be non-empty names"),
        (("a", "b", "c"), 2, "engines must be >= the number of models"),
    ],
)
def test_bad_models_are_refused(models: tuple[str, ...], engines: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DemoSettings(models=models, engines=engines)


async def test_one_engine_per_model_behind_the_demo_controller(tmp_path: Path) -> None:
    settings = DemoSettings(models=MODELS, engines=2, time_scale=50.0)
    async with (
        run_engines(settings, {"controller": "fcfs"}, tmp_path) as urls,
        httpx.AsyncClient(timeout=30) as http,
    ):
        served = [
            (await http.get(url + "/v1/models")).json()["data"][0]["id"]
            for url in urls["controller"]
        ]
        assert served == list(MODELS)
        setup = controller_setup(settings, urls["controller"])
        async with run_controller(setup, tmp_path, None) as controller:
            listed = (await http.get(controller.url + "/v1/models")).json()["data"]
            answers = []
            for i in range(6):
                body = {
                    "model": MODELS[i % 2],
                    "messages": [{"role": "user", "content": f"step {i}"}],
                    "max_tokens": 4,
                }
                response = await http.post(controller.url + "/v1/chat/completions", json=body)
                answers.append((response.status_code, response.json().get("model")))
    assert {entry["id"] for entry in listed} == set(MODELS)
    assert answers == [(200, MODELS[i % 2]) for i in range(6)]
