"""Models in the SDK (docs/sdk.md, "Models"), over real HTTP: a node names its model or an
ordered list of candidates; the next candidate is tried when the controller answers that a
model is not served (404) or has no backend up (503); the chosen one is the node's name in
the DAG and its span's ``gen_ai.request.model``, every candidate tried is a span of its own.
Two emulated engines serve different models behind a controller."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrt
from agentrt import LLMCallError, Runtime, RuntimeConfig
from agentrt.runtime.chat import model_candidates
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig
from agentrt_controller.service.http.server import serve_controller
from agentrt_emulator.server import EmulatorConfig, serve_engine

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PLANNER = "org/planner-8b"
VERIFIER = "org/verifier-1b"
ASK = [{"role": "user", "content": "check this plan"}]


@pytest.mark.parametrize(
    ("given", "candidates"),
    [(None, ()), ("m", ("m",)), (["a", "b"], ("a", "b")), (("a",), ("a",))],
)
def test_model_candidates(given: Any, candidates: tuple[str, ...]) -> None:
    assert model_candidates(given) == candidates


@pytest.mark.parametrize("given", [[], ["a", ""], ["a", "a"], [3]])
def test_bad_model_candidates_are_refused(given: Any) -> None:
    with pytest.raises(ValueError, match="model"):
        model_candidates(given)


async def test_candidates_in_order_the_chosen_one_on_the_node_and_span() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    engines = (EmulatorConfig(model_name=m, time_scale=50.0) for m in (PLANNER, VERIFIER))
    async with (
        serve_engine(next(engines)) as planner,
        serve_engine(next(engines)) as verifier,
        serve_controller(
            ControllerConfig(
                port=0,
                backends=(
                    BackendSpec.parse(f"{planner.base_url},kind=emulator,id=planner"),
                    BackendSpec.parse(f"{verifier.base_url},kind=emulator,id=verifier"),
                ),
            )
        ) as url,
    ):
        config = RuntimeConfig(
            base_url=url + "/v1", controller="required", tracer_provider=tracer_provider
        )
        async with Runtime(config) as rt, rt.program("plan-and-verify") as prog:
            # The first candidate is served nowhere (404): the next one answers.
            reply = await agentrt.chat(ASK, model=["org/verifier-70b", VERIFIER], max_tokens=8)
            plain = await agentrt.chat(ASK, model=PLANNER, max_tokens=8)
            with pytest.raises(LLMCallError) as refused:
                await agentrt.chat(ASK, model=["org/a", "org/b"], max_tokens=8)
            dag = prog.to_dict()
        async with httpx.AsyncClient() as http:
            served = (await http.get(verifier.base_url + "/metrics")).text
    assert reply.model == VERIFIER and plain.model == PLANNER
    assert refused.value.status_code == 404  # the last candidate's answer
    first, second, third = dag["nodes"]
    assert (first["name"], first["status"]) == (VERIFIER, "ok")
    assert first["model_candidates"] == ["org/verifier-70b", VERIFIER]
    assert first["attempts"] == 2  # one node, two requests
    assert (second["name"], "model_candidates" in second) == (PLANNER, False)
    assert (third["name"], third["status"]) == ("org/b", "error")
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    tried = [
        (
            dict(s.attributes or {})["gen_ai.request.model"],
            s.status.is_ok,
            dict(s.attributes or {}).get("agentrt.model.candidates"),
        )
        for s in chats
    ]
    assert tried[:3] == [
        ("org/verifier-70b", False, ("org/verifier-70b", VERIFIER)),
        (VERIFIER, True, ("org/verifier-70b", VERIFIER)),
        (PLANNER, True, None),
    ]
    assert 'model_name="org/verifier-1b"' in served
