"""A fake SGLang server speaking SGLang's DOCUMENTED API — not SGLang itself.

What it implements, and where each piece is documented (docs/backends.md, "SGLang"):

* ``GET /metrics`` — ``sglang:`` gauges and counters as on
  https://docs.sglang.io/references/production_metrics.html, one series per
  ``tp_rank`` (as a tensor-parallel server exports them);
* ``POST /v1/chat/completions`` — records the body (``priority``, ``cache_salt``...);
* ``POST /hicache/pin_prefix {"token_ids", "ttl_seconds"}`` and
  ``POST /hicache/unpin_prefix {"token_ids"}`` — SGLang PR #18941: pinning is refused while
  the pin budget (``SGLANG_HICACHE_MAX_PINNED_RATIO``) is 0; when the budget runs out mid-prefix
  the answer says the prefix was partially pinned. ``with_pin_endpoints=False`` models a build
  without them (404: before #18941, or after its revert in #21884).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

METRICS = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="tiny",tp_rank="0"} 3
sglang:num_running_reqs{model_name="tiny",tp_rank="1"} 2
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="tiny",tp_rank="0"} 4
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="tiny",tp_rank="0"} 0.28
sglang:token_usage{model_name="tiny",tp_rank="1"} 0.31
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="tiny",tp_rank="0"} 0.0075
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="tiny",cache_source="device"} 1200
sglang:cached_tokens_total{model_name="tiny",cache_source="host"} 34
"""


@dataclass
class FakeSGLang:
    model: str = "tiny"
    #: SGLANG_HICACHE_MAX_PINNED_RATIO > 0: how many tokens may be pinned in all.
    pin_budget_tokens: int = 0
    with_pin_endpoints: bool = True
    #: Pinned prefixes: token ids -> ttl_seconds.
    pinned: dict[tuple[int, ...], int] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)


def build_sglang(fake: FakeSGLang) -> Starlette:
    async def chat(request: Request) -> Response:
        body = await request.json()
        fake.requests.append(body)
        message = {"role": "assistant", "content": "ok"}
        return JSONResponse(
            {"id": "sglang-1", "object": "chat.completion", "model": fake.model,
             "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}}
        )  # fmt: skip

    async def pin(request: Request) -> Response:
        body = await request.json()
        tokens = tuple(body["token_ids"])
        ttl = body["ttl_seconds"]
        if not isinstance(ttl, int) or ttl <= 0:
            return JSONResponse({"success": False, "message": "bad ttl_seconds"}, 400)
        if fake.pin_budget_tokens <= 0:
            message = "Pinning is disabled (SGLANG_HICACHE_MAX_PINNED_RATIO is 0)"
            return JSONResponse({"success": False, "message": message}, 400)
        used = sum(len(t) for t in fake.pinned)
        room = fake.pin_budget_tokens - used
        if room <= 0:
            return JSONResponse({"success": False, "message": "pin budget exhausted"}, 400)
        fake.pinned[tokens[:room]] = ttl
        if room < len(tokens):
            return JSONResponse(
                {"success": True, "pinned_count": room,
                 "message": f"Partially pinned {room}/{len(tokens)} tokens: pin budget exhausted"}
            )  # fmt: skip
        return JSONResponse({"success": True, "pinned_count": len(tokens), "message": "ok"})

    async def unpin(request: Request) -> Response:
        body = await request.json()
        tokens = tuple(body["token_ids"])
        for key in list(fake.pinned):
            if tokens[: len(key)] == key:
                del fake.pinned[key]
        return JSONResponse({"success": True, "message": "ok"})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": fake.model, "object": "model"}]})

    async def metrics(request: Request) -> Response:
        return PlainTextResponse(METRICS)

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models),
        Route("/metrics", metrics),
        Route("/health", health),
    ]
    if fake.with_pin_endpoints:
        routes += [
            Route("/hicache/pin_prefix", pin, methods=["POST"]),
            Route("/hicache/unpin_prefix", unpin, methods=["POST"]),
        ]
    return Starlette(routes=routes)
