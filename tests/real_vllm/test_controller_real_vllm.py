"""The controller in front of a REAL vLLM (CPU build, tiny model; docs/real-vllm.md, section
"Controller in front of real vLLM: what the tests prove").

1. Both scheduling levers (docs/controller.md, "The two levers") change the order in which
   queued calls complete under ``--max-num-seqs 2``: the PLAS priority passed through as
   vLLM's ``priority`` (large admission window, priority server), and the controller's own
   queue (window 2, FCFS server, priority off). Without a lever the same calls complete in
   arrival order.
2. vLLM's metrics are scraped and used: prefix-cache counters (and the ``cached_tokens`` of each
   answer, which decide what a program is charged), ``num_requests_waiting`` driving the
   adaptive admission window, ``num_requests_running`` and ``kv_cache_usage_perc``.
3. ``cache_salt`` passes through intact and separates tenants.
4. A client that goes away aborts the request inside vLLM, streamed or not.

Every test starts its own controller (port 0) in front of the session's shared servers; they
run one after another, so vLLM metric deltas belong to the test that reads them.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import httpx
import pytest
from openai import BadRequestError
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .controller_helpers import (
    client_for,
    controller_for,
    program_headers,
    queued_completion_order,
    wait_until,
)
from .test_engine_behaviour import GENERATED, HITS, QUERIES, RUNNING, code_text, prompt_tokens

pytestmark = [pytest.mark.slow, pytest.mark.anyio, pytest.mark.timeout(300)]

# --- 1. the two levers -------------------------------------------------------------------------

#: PLAS with small queue boundaries and a cost model that charges 10 ms per output token and
#: nothing for the prompt, so that a program's level follows from the tokens it generated.
#: Retention (on by default) is off: it weighs recompute cost, which this cost model does not
#: charge, and its admission preference is not the lever under test.
PLAS = {
    "policy": "plas",
    "retention": "off",
    "scheduling": {"boundaries_s": [0.1, 0.3, 1.0, 4.0]},
    "cost": {"prefill_s_per_token": 0.0, "decode_s_per_token": 0.01, "per_call_s": 0.0},
}
#: Program -> output tokens of its warm-up call -> attained service (s) -> PLAS queue level:
#: H is fresh (0 s, Q1), M has 20 tokens (0.2 s, Q2), W has 50 tokens (0.5 s, Q3).
WARM_UP_TOKENS = {"W": 50, "M": 20}
LEVELS = {"H": 0, "M": 1, "W": 2}
#: Arrival order of the queued calls: the reverse of their PLAS order.
ARRIVAL = ("W", "M", "H")
BY_LEVEL = ["H", "M", "W"]

LEVERS = [
    # (server fixture, priority switch, admission window, calls held at the controller,
    #  expected completion order)
    pytest.param("vllm_server", True, None, 0, BY_LEVEL, id="priority-passthrough"),
    pytest.param("vllm_server", False, None, 0, list(ARRIVAL), id="no-lever"),
    pytest.param("vllm_fcfs_server", False, 2, 3, BY_LEVEL, id="controller-window"),
]


@pytest.mark.parametrize(("server_fixture", "priority", "window", "held", "expected"), LEVERS)
async def test_program_priority_orders_queued_calls(
    request: pytest.FixtureRequest,
    server_fixture: str,
    priority: bool,
    window: int | None,
    held: int,
    expected: list[str],
) -> None:
    server = request.getfixturevalue(server_fixture)
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    run = uuid.uuid4().hex[:8]
    programs = {name: f"{name}-{run}" for name in LEVELS}
    async with controller_for(
        server, priority=priority, admission_window=window, tracer_provider=tracing, **PLAS
    ) as controller:
        async with client_for(controller.openai_url) as client:
            for name, tokens in WARM_UP_TOKENS.items():
                await client.completions.create(
                    model=server.model,
                    prompt=f"warm up {name}",
                    max_tokens=tokens,
                    extra_body={"ignore_eos": True},
                    extra_headers=program_headers(programs[name]),
                )
        table = await controller.get("/agentrt/v1/programs")
        order = await queued_completion_order(
            server,
            controller,
            [(name, programs[name]) for name in ARRIVAL],
            held_at_controller=held,
        )
    # The attained service the levels come from: 10 ms per generated token.
    service = {e["program_id"]: e["attained_service_s"] for e in table["entries"]}
    for name, tokens in WARM_UP_TOKENS.items():
        assert service[programs[name]] == pytest.approx(tokens * 0.01)
    # What the controller sent: each queued call's level as vLLM's priority, or nothing.
    sent = {
        span.attributes["agentrt.program_id"]: span.attributes["agentrt.priority"]
        for span in exporter.get_finished_spans()
        if span.attributes is not None and span.attributes.get("agentrt.queue_level") is not None
    }
    for name, level in LEVELS.items():
        assert sent[programs[name]] == (level if priority else -1)  # -1: no priority field
    assert order == expected


# --- 2. metrics scraped and used ---------------------------------------------------------------


async def backend_load(controller: Any) -> dict[str, Any]:
    """The controller's last scrape of its one backend (GET /agentrt/v1/backends)."""
    (backend,) = (await controller.get("/agentrt/v1/backends"))["backends"]
    load: dict[str, Any] = backend["load"]
    return load


async def test_prefix_cache_counters_are_scraped_and_cached_tokens_are_not_charged(
    vllm_server: Any, vllm_metrics: Any
) -> None:
    block = vllm_server.block_size
    content = f"{uuid.uuid4().hex}\n{code_text(70)}"
    n = await prompt_tokens(vllm_server, content)
    hit = (n - 1) // block * block
    assert n > 2 * block, f"prompt of {n} tokens is too short for this test"
    program = f"prefix-{uuid.uuid4().hex[:8]}"
    prefill_s = 0.001  # charged per uncached prompt token; output tokens are free here
    cost = {"prefill_s_per_token": prefill_s, "decode_s_per_token": 0.0, "per_call_s": 0.0}
    async with controller_for(
        vllm_server, priority=True, policy="plas", cost=cost, scrape_interval_s=0.2
    ) as controller:
        engine = await vllm_metrics()
        # At rest the controller's scrape equals the engine's own counters.
        before = await wait_until(
            lambda: backend_load(controller),
            lambda load: (
                load["prefix_cache_hits"] == engine[HITS]
                and load["prefix_cache_queries"] == engine[QUERIES]
            ),
            15,
            "a scrape of the idle engine",
        )
        cached = []
        async with client_for(controller.openai_url) as client:
            for node in range(2):
                response = await client.chat.completions.create(
                    model=vllm_server.model,
                    messages=[{"role": "user", "content": content}],
                    max_tokens=1,
                    extra_headers=program_headers(program, node),
                )
                assert response.usage is not None and response.usage.prompt_tokens == n
                details = response.usage.prompt_tokens_details
                assert details is not None
                cached.append(details.cached_tokens)
        entry = next(
            e
            for e in (await controller.get("/agentrt/v1/programs"))["entries"]
            if e["program_id"] == program
        )
        after = await wait_until(
            lambda: backend_load(controller),
            lambda load: load["prefix_cache_queries"] >= before["prefix_cache_queries"] + 2 * n,
            15,
            "a scrape after both calls",
        )
        metrics = await controller.metrics_text()
    # The answers pass vLLM's per-call hit count through: whole 128-token blocks only.
    assert cached == [0, hit]
    # The scraped counters moved by exactly that (tokens, not requests).
    assert after["prefix_cache_queries"] - before["prefix_cache_queries"] == 2 * n
    assert after["prefix_cache_hits"] - before["prefix_cache_hits"] == hit
    # Used: the program is charged only for prompt tokens vLLM had to compute (PLAS priority).
    assert entry["attained_service_s"] == pytest.approx(prefill_s * (2 * n - hit))
    assert f"agentrt_controller_uncached_prompt_tokens_total {2 * n - hit}" in metrics


async def test_scraped_waiting_queue_shrinks_the_adaptive_window(vllm_server: Any) -> None:
    """Adaptive admission (docs/scheduling.md): with a target of 0 requests waiting inside
    vLLM, a burst of 8 calls (2 run, 6 wait inside vLLM) makes the next calls shrink the
    window and wait at the controller, where the program-level order applies."""
    admission = {"initial_window": 8, "min_window": 1, "max_window": 8, "target_waiting": 0}
    seen: dict[str, float] = {"waiting": 0, "running": 0, "kv": 0.0, "queued": 0, "window": 8}
    async with controller_for(
        vllm_server,
        priority=True,
        policy="atlas",
        admission_window="adaptive",
        admission=admission,
        scrape_interval_s=0.1,
    ) as controller:
        engine = controller.app.core
        backend_id = controller.backend_id
        window_of = getattr(engine.dispatcher.admission, "window")  # noqa: B009 (adaptive only)
        done = anyio.Event()

        async def watch() -> None:
            while not done.is_set():
                (view,) = engine.pool.views()
                seen["waiting"] = max(seen["waiting"], view.num_waiting or 0)
                seen["running"] = max(seen["running"], view.num_running or 0)
                seen["kv"] = max(seen["kv"], view.kv_cache_usage or 0.0)
                seen["queued"] = max(seen["queued"], engine.calls.queued())
                seen["window"] = min(seen["window"], window_of(backend_id))
                await anyio.sleep(0.01)

        async def call(client: Any, i: int) -> None:
            await client.completions.create(
                model=vllm_server.model,
                prompt=f"burst {i}",
                max_tokens=100,
                extra_body={"ignore_eos": True},
            )

        async with (
            client_for(controller.openai_url) as client,
            anyio.create_task_group() as outer,
        ):
            outer.start_soon(watch)
            sent = 8
            async with anyio.create_task_group() as calls:
                for i in range(sent):
                    calls.start_soon(call, client, i)
                # The window only matters (and is only re-evaluated) while calls are queued:
                # send 4 more once a scrape shows vLLM's queue. On a loaded machine the burst
                # can drain before they arrive, so none of them queue at the controller: then
                # send 4 more behind the next scrape that shows a queue (at most 5 rounds).
                for _ in range(5):
                    with anyio.fail_after(60):
                        while not engine.pool.views()[0].num_waiting:  # noqa: ASYNC110
                            await anyio.sleep(0.01)
                    for _ in range(4):
                        calls.start_soon(call, client, sent)
                        sent += 1
                    await anyio.sleep(0.3)  # the 4 reach the controller and the next scrape
                    if seen["window"] < 8 and seen["queued"] >= 1:
                        break
            done.set()
        metrics = await controller.metrics_text()
    assert seen["waiting"] >= 1, seen  # vllm:num_requests_waiting reached the controller
    assert seen["running"] == vllm_server.max_num_seqs, seen
    assert 0.0 < seen["kv"] <= 1.0, seen  # vllm:kv_cache_usage_perc, a fraction
    assert seen["window"] < 8 and seen["queued"] >= 1, seen  # held at the controller
    assert f'agentrt_controller_admissions_total{{backend="{backend_id}"}} {sent}' in metrics
    assert f'agentrt_controller_backend_num_requests_waiting{{backend="{backend_id}"}}' in metrics


# --- 3. cache_salt -------------------------------------------------------------------------------


async def test_cache_salt_passes_through_and_separates_tenants(vllm_server: Any) -> None:
    block = vllm_server.block_size
    content = f"{uuid.uuid4().hex}\n{code_text(40)}"
    n = await prompt_tokens(vllm_server, content)
    full_hit = (n - 1) // block * block
    assert full_hit >= block

    # priority=True: the controller splices "priority" into the body; the salt must survive.
    async with (
        controller_for(vllm_server, priority=True, policy="atlas") as controller,
        client_for(controller.openai_url) as client,
    ):

        async def cached(salt: str | None) -> int:
            response = await client.chat.completions.create(
                model=vllm_server.model,
                messages=[{"role": "user", "content": content}],
                max_tokens=1,
                extra_body=None if salt is None else {"cache_salt": salt},
            )
            assert response.usage is not None and response.usage.prompt_tokens_details
            return response.usage.prompt_tokens_details.cached_tokens or 0

        assert [await cached("tenant-a"), await cached("tenant-a")] == [0, full_hit]
        assert await cached("tenant-b") == 0  # same prompt, other tenant: nothing shared
        assert [await cached(None), await cached(None)] == [0, full_hit]  # no salt: its own
        # vLLM's validation of the salt reaches the client unchanged (400, param cache_salt).
        with pytest.raises(BadRequestError, match="cache_salt"):
            await cached("tenant/a")


# --- 4. client disconnects ----------------------------------------------------------------------

LONG_TOKENS = 2000  # >= 8 s at the 4 ms step floor: far longer than an abort takes


async def assert_aborted_upstream(
    vllm_metrics: Any, controller: Any, before: dict[str, float]
) -> None:
    """vLLM's batch is empty again, no more tokens come, and the controller has nothing in
    flight."""
    after = await wait_until(
        vllm_metrics, lambda m: m[RUNNING] == 0, 15, "the request to leave vLLM's batch"
    )
    await wait_until(
        lambda: controller.get("/agentrt/v1/queues"),
        lambda q: q["backends"][0]["in_flight"] == 0 and q["queued"] == 0,
        15,
        "the controller to release the call",
    )
    await anyio.sleep(1.0)  # had it kept running, hundreds more tokens would appear meanwhile
    later = await vllm_metrics()
    generated = after[GENERATED] - before[GENERATED]
    assert generated < LONG_TOKENS, f"{generated} tokens: the request ran to its end"
    assert later[GENERATED] == after[GENERATED], "tokens kept coming after the abort"
    assert "agentrt_controller_client_disconnects_total 1" in await controller.metrics_text()


async def test_closed_stream_aborts_the_request_inside_vllm(
    vllm_server: Any, vllm_metrics: Any
) -> None:
    before = await wait_until(vllm_metrics, lambda m: m[RUNNING] == 0, 15, "an idle engine")
    async with (
        controller_for(vllm_server, priority=True, policy="atlas") as controller,
        client_for(controller.openai_url) as client,
    ):
        stream = await client.chat.completions.create(
            model=vllm_server.model,
            messages=[{"role": "user", "content": "Write a very long story."}],
            max_tokens=LONG_TOKENS,
            stream=True,
            extra_body={"ignore_eos": True},
            extra_headers=program_headers(f"stream-{uuid.uuid4().hex[:8]}"),
        )
        received = 0
        async for _chunk in stream:
            received += 1
            if received == 5:
                break
        await stream.close()  # the client goes away mid-stream
        await assert_aborted_upstream(vllm_metrics, controller, before)


async def test_client_leaving_a_whole_answer_aborts_the_request_inside_vllm(
    vllm_server: Any, vllm_metrics: Any
) -> None:
    """A non-streamed call: the controller notices the client's disconnect while it waits for
    vLLM's whole answer, and closes its upstream request."""
    before = await wait_until(vllm_metrics, lambda m: m[RUNNING] == 0, 15, "an idle engine")
    body = {
        "model": vllm_server.model,
        "prompt": "Write a very long story.",
        "max_tokens": LONG_TOKENS,
        "ignore_eos": True,
    }
    async with controller_for(vllm_server, priority=True, policy="atlas") as controller:
        async with httpx.AsyncClient(timeout=120.0) as http, anyio.create_task_group() as tg:

            async def call() -> None:
                await http.post(controller.openai_url + "/completions", json=body)

            tg.start_soon(call)
            # The request runs inside vLLM (tokens are being generated) ...
            await wait_until(
                vllm_metrics,
                lambda m: m[RUNNING] == 1 and m[GENERATED] > before[GENERATED],
                60,
                "the request to run in vLLM",
            )
            tg.cancel_scope.cancel()  # ... when the client gives up and closes its connection.
        await assert_aborted_upstream(vllm_metrics, controller, before)
