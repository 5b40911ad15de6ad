"""``agentrt demo --models`` end to end: a planner model and a small verifier model, one
emulated engine per model, the agents calling both; the summary shows per model where its calls
went, 0 calls on an engine not serving their model (from the engines' own counters) and the
two-model programs as one process-table entry each. Also the emulator's counter itself: an
engine counts the calls it refuses for naming a model it does not serve."""

from __future__ import annotations

import io
import json
from pathlib import Path

import anyio
import httpx
import pytest

from agentrt_demo.app import run_demo
from agentrt_demo.models import ProcessTableSample, scrape_engine_calls
from agentrt_demo.settings import DEMO_MODELS, DemoSettings
from agentrt_emulator.server import EmulatorConfig, serve_engine

PLANNER, SMALL = DEMO_MODELS


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_quick_demo_with_two_models_reports_where_calls_went(tmp_path: Path) -> None:
    settings = DemoSettings(
        out_dir=tmp_path / "out",
        progress="off",
        frameworks=False,
        timeline_formats=("html",),
        models=DEMO_MODELS,
    ).quick_variant()
    out = io.StringIO()
    result = anyio.run(run_demo, settings, out)
    summary = out.getvalue()
    assert result.status == 0, summary

    document = json.loads((settings.out_dir / "summary.json").read_text())
    assert document["settings"]["models"] == list(DEMO_MODELS)
    for label in ("controller", "direct"):
        models = document["phases"][label]["models"]
        assert models["wrong_routes"] == 0
        assert set(models["sent"]) == {PLANNER, SMALL}
        assert not models["failed"]
        by_model = {e["model"]: e for e in models["engines"]}
        assert set(by_model) == {PLANNER, SMALL}
        for model, engine in by_model.items():
            # Every call a program sent to a model was run by that model's engine.
            assert engine["requests"] == models["sent"][model]
            assert engine["unserved_model"] == 0
        assert f"{label}: calls that reached an engine not serving their model: 0" in summary
        assert f"{label}: {SMALL}: {models['sent'][SMALL]} calls sent" in summary
    controller = document["phases"]["controller"]["models"]
    assert controller["readings"] > 0
    assert controller["max_entries_per_program"] == 1
    # The map-reduce programs summarise with the small model, then combine with the planner:
    # their one entry holds calls on both models' engines.
    assert 1 <= controller["two_model_programs"] <= controller["programs_using_both"]
    assert (
        document["phases"]["direct"]["models"]["programs_using_both"]
        == (controller["programs_using_both"])
    )
    assert "programs called both models;" in summary


@pytest.mark.anyio
@pytest.mark.timeout(30)
async def test_an_engine_counts_calls_for_a_model_it_does_not_serve() -> None:
    config = EmulatorConfig(model_name=PLANNER, time_scale=50.0)
    async with serve_engine(config) as engine, httpx.AsyncClient(timeout=10) as http:
        for model in (PLANNER, SMALL, SMALL):
            await http.post(
                engine.base_url + "/v1/chat/completions",
                json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
            )
        (calls,) = await scrape_engine_calls({engine.base_url: PLANNER})
    assert (calls.model, calls.requests, calls.unserved_model) == (PLANNER, 1, 2)


def test_a_process_table_sample_keeps_each_entrys_backends() -> None:
    sample = ProcessTableSample()
    sample.add([{"program_id": "p1", "backends": {"b0": 2}}, {"program_id": "p2"}])
    sample.add([{"program_id": "p1", "backends": {"b1": 1}}])
    assert sample.readings == 2
    assert sample.backends == {"p1": {"b0", "b1"}}
    assert sample.max_entries_per_program == 1
