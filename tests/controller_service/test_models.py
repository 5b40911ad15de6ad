"""Must-show (issue #26): several models behind one controller, over real HTTP.

Two emulated engines serve different models (``serve_engine`` with its own ``model_name``)
behind ``serve_controller``: 200 mixed calls all reach an engine of their model (each engine's
own ``vllm:request_success`` counter holds exactly its model's calls; an engine answers 404 to
any other model, so a wrong route could not pass as a 200), ``/v1/models`` is the union plus
the aliases, an unknown model is a JSON 404 naming the served ones, an alias and a fallback
work, and a program that calls both models is one process-table entry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections import Counter
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest

import agentrt
from agentrt import Runtime, RuntimeConfig
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig
from agentrt_controller.service.http.server import serve_controller
from agentrt_emulator.server import EmulatorConfig, RunningEmulator, serve_engine
from agentrt_emulator.server.embed import serve_engine_in_thread

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PLANNER = "org/planner-8b"
VERIFIER = "org/verifier-1b"
CHAT = "/v1/chat/completions"


def _engine(model: str) -> EmulatorConfig:
    return EmulatorConfig(model_name=model, time_scale=50.0)


def _config(planner: RunningEmulator, verifier: RunningEmulator) -> ControllerConfig:
    return ControllerConfig(
        port=0,
        scrape_interval_s=0.2,
        backends=(
            BackendSpec.parse(f"{planner.base_url},kind=emulator,id=planner"),
            BackendSpec.parse(f"{verifier.base_url},kind=emulator,id=verifier"),
        ),
        model_aliases={"small": VERIFIER},
        model_fallbacks={PLANNER: (VERIFIER,)},
    )


async def _successes(http: httpx.AsyncClient, engine: RunningEmulator) -> dict[str, float]:
    """Calls the engine finished, by ``model_name``, from its own ``/metrics``
    (``vllm:request_success_total``)."""
    text = (await http.get(engine.base_url + "/metrics")).text
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total{"):
            labels, value = line.rsplit(" ", 1)
            model = labels.split('model_name="', 1)[1].split('"', 1)[0]
            counts[model] += float(value)
    return {model: n for model, n in counts.items() if n}


def _body(model: str | None, i: int) -> dict[str, object]:
    body: dict[str, object] = {
        "messages": [{"role": "user", "content": f"question {i}: " + "context " * (i % 7)}],
        "max_tokens": 8,
    }
    if model is not None:
        body["model"] = model
    return body


@contextlib.asynccontextmanager
async def _cluster() -> AsyncIterator[tuple[str, RunningEmulator, RunningEmulator]]:
    async with (
        serve_engine(_engine(PLANNER)) as planner,
        serve_engine(_engine(VERIFIER)) as verifier,
        serve_controller(_config(planner, verifier)) as url,
    ):
        yield url, planner, verifier


async def test_two_models_no_wrong_route_in_200_mixed_calls() -> None:
    rng = random.Random(26)
    asked = [rng.choice((PLANNER, VERIFIER, "small")) for _ in range(200)]
    expected = Counter(VERIFIER if m == "small" else m for m in asked)
    async with _cluster() as (url, planner, verifier), httpx.AsyncClient(timeout=30) as http:
        statuses: Counter[int] = Counter()
        wrong: list[tuple[str, str]] = []
        limit = anyio.CapacityLimiter(24)

        async def one(i: int, model: str) -> None:
            async with limit:
                response = await http.post(url + CHAT, json=_body(model, i))
            statuses[response.status_code] += 1
            if response.status_code == 200:
                answered = response.json()["model"]
                if answered != (VERIFIER if model == "small" else model):
                    wrong.append((model, answered))

        async with anyio.create_task_group() as group:
            for i, model in enumerate(asked):
                group.start_soon(one, i, model)
        listed = (await http.get(url + "/v1/models")).json()
        backends = (await http.get(url + "/agentrt/v1/queues")).json()["backends"]
        planner_done = await _successes(http, planner)
        verifier_done = await _successes(http, verifier)

    assert statuses == {200: 200}, statuses
    assert wrong == []
    # Each engine finished exactly its model's calls: nothing else reached it.
    assert planner_done == {PLANNER: expected[PLANNER]}
    assert verifier_done == {VERIFIER: expected[VERIFIER]}
    admitted = {b["backend_id"]: b["admitted_total"] for b in backends}
    assert admitted == {"planner": expected[PLANNER], "verifier": expected[VERIFIER]}
    # /v1/models: the union of the engines' models, and the alias of one of them.
    ids = {entry["id"] for entry in listed["data"]}
    assert ids == {PLANNER, VERIFIER, "small"}
    alias = next(entry for entry in listed["data"] if entry["id"] == "small")
    assert alias["root"] == VERIFIER


async def test_unknown_model_404_names_served_and_missing_model_400() -> None:
    async with _cluster() as (url, _, _), httpx.AsyncClient(timeout=30) as http:
        unknown = await http.post(url + CHAT, json=_body("gpt-9", 1))
        missing = await http.post(url + CHAT, json=_body(None, 2))
        # Routed, not scheduled paths take the same names.
        tokenized = await http.post(url + "/tokenize", json={"model": "small", "prompt": "hi"})
        not_tokenized = await http.post(url + "/tokenize", json={"model": "x", "prompt": "hi"})
    assert unknown.status_code == 404
    error = unknown.json()["error"]
    assert error["code"] == "model_not_found"
    assert error["param"] == "model"
    assert PLANNER in error["message"] and VERIFIER in error["message"]
    assert "'small' -> " in error["message"]
    # Two models served: the controller cannot guess; it says which exist.
    assert missing.status_code == 400
    assert PLANNER in missing.json()["error"]["message"]
    assert tokenized.status_code == 200, tokenized.text
    assert not_tokenized.status_code == 404


async def test_one_model_served_a_call_without_model_gets_it() -> None:
    async with serve_engine(_engine(VERIFIER)) as verifier:
        config = ControllerConfig(
            port=0, backends=(BackendSpec.parse(f"{verifier.base_url},kind=emulator"),)
        )
        async with serve_controller(config) as url, httpx.AsyncClient(timeout=30) as http:
            response = await http.post(url + CHAT, json=_body(None, 1))
    assert response.status_code == 200, response.text
    assert response.json()["model"] == VERIFIER


async def _wait_out(http: httpx.AsyncClient, url: str, backend_id: str) -> None:
    with anyio.fail_after(20):
        while True:
            backends = (await http.get(url + "/agentrt/v1/queues")).json()["backends"]
            if not next(b for b in backends if b["backend_id"] == backend_id)["healthy"]:
                return
            await anyio.sleep(0.05)


async def test_fallback_when_every_backend_of_a_model_is_out() -> None:
    # The planner's engine runs on a loop of its own, so it can stop while the rest runs.
    planner_server = serve_engine_in_thread(_engine(PLANNER))
    planner = planner_server.__enter__()
    try:
        async with serve_engine(_engine(VERIFIER)) as verifier:
            with_fallback = _config(planner, verifier)
            without = dataclasses.replace(with_fallback, model_fallbacks={})
            async with (
                serve_controller(with_fallback) as url,
                serve_controller(without) as bare_url,
                httpx.AsyncClient(timeout=30) as http,
            ):
                before = await http.post(url + CHAT, json=_body(PLANNER, 1))
                assert before.json()["model"] == PLANNER
                # The planner's only engine stops.
                await anyio.to_thread.run_sync(planner_server.__exit__, None, None, None)
                await _wait_out(http, url, "planner")
                await _wait_out(http, bare_url, "planner")
                after = await http.post(url + CHAT, json=_body(PLANNER, 2))
                bare = await http.post(bare_url + CHAT, json=_body(PLANNER, 3))
                small = await http.post(bare_url + CHAT, json=_body("small", 4))
                # An SDK node with candidates moves on at once (no retry of the 503).
                config = RuntimeConfig(base_url=bare_url + "/v1", controller="required")
                async with Runtime(config) as rt, rt.program("candidates") as prog:
                    with anyio.fail_after(5):
                        reply = await agentrt.chat(
                            [{"role": "user", "content": "verify"}],
                            model=[PLANNER, "small"],
                            max_tokens=8,
                        )
                    node = prog.to_dict()["nodes"][0]
    finally:
        planner_server.__exit__(None, None, None)
    assert after.status_code == 200, after.text
    assert after.json()["model"] == VERIFIER  # the fallback ran it
    # Without a fallback: 503 that tells the caller to choose another model (no Retry-After,
    # the openai client's x-should-retry off), while the other model still answers.
    assert bare.status_code == 503
    assert bare.json()["error"]["code"] == "model_unavailable"
    assert "retry-after" not in bare.headers
    assert bare.headers["x-should-retry"] == "false"
    assert small.status_code == 200
    assert reply.model == VERIFIER
    assert (node["name"], node["attempts"]) == ("small", 2)


async def test_a_program_on_two_models_is_one_process_table_entry() -> None:
    async with _cluster() as (url, _, _), httpx.AsyncClient(timeout=30) as http:
        config = RuntimeConfig(base_url=url + "/v1", controller="required")
        async with Runtime(config) as rt, rt.program("plan-and-verify", timeout_s=60) as prog:
            plan = [{"role": "user", "content": "plan the work"}]
            await agentrt.chat(plan, model=PLANNER, max_tokens=8)
            await agentrt.chat(plan, model="small", max_tokens=8)
            await agentrt.chat(plan, model=PLANNER, max_tokens=8)
            table = (await http.get(url + "/agentrt/v1/programs")).json()
            program_id = prog.id
    ours = [e for e in table["entries"] if e["program_id"] == program_id]
    assert table["programs"] == 1 and len(ours) == 1, table
    entry = ours[0]
    # One entry: its calls on both models, their service counted together.
    assert entry["calls_finished"] == 3
    assert entry["backends"] == {"planner": 2, "verifier": 1}
    assert entry["attained_service_s"] > 0
