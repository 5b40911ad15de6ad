"""Prefix index: the estimate vs vLLM's KV events, on the same run (docs/benchmarks.md,
"Prefix index: estimate vs vLLM's KV events"; INDICATIVE: a tiny random model on a 2-core CPU).

Two real vLLM 0.32 CPU servers (scripts/vllm/server.py; prefix caching, ``--kv-events-config``
with a replay socket, ``--kv-cache-bytes`` small enough that the workload evicts) behind one
in-process controller with the ``prefix`` router and both backends' ``kv_events``. A seeded,
sequential workload (one call at a time, so every lookup sees a settled cache):

* ``--programs`` agent programs of ``--turns`` turns, round robin: every program's context is
  a shared system prompt (tool schemas) + its own history + a new user message; the answers
  (``--max-tokens``) are appended to the history;
* every ``--foreign-every`` calls, a request from **another client** straight to a backend,
  never through the controller, which the estimate never hears of: ``--foreign-mode long``
  sends a long prompt of its own to backend 0 (it takes cache space: evictions);
  ``duplicate`` sends the controller's next prompt to backend 1 just before the controller
  does (another client — a second router, a hedged request — warmed the other backend).

Before each controller call, for each backend: the cached prompt tokens the estimate
(``PrefixIndex``, what the controller routed) predicts and those the exact index (the
backend's KV events) says — *agreement* when they name the same number of full blocks; the
backend each would choose (the router's formula: prefix cost score + 0.2 x affinity) —
*decisions that change*. After the call: vLLM's ``usage.prompt_tokens_details.cached_tokens``
on the backend that served it (the controller routes with the exact index where synced), and
the predictions of both indexes for that backend; hit rate = cached / prompt tokens.

Run: ``.venv/bin/python benchmarks/kv_index_compare.py`` (needs scripts/vllm/setup.sh; ~4 min:
two server starts and ~60 calls); ``--json PATH`` keeps the record.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx

from agentrt.protocol import HEADER_NODE_ID, HEADER_PROGRAM_ID
from agentrt_controller.backends import BackendSpec
from agentrt_controller.keys import ProgramKey
from agentrt_controller.routing.hashing import request_block_hashes
from agentrt_controller.routing.scorers import AffinityScorer, PrefixCostScorer
from agentrt_controller.scheduling.api import BackendView
from agentrt_controller.scheduling.call import CallEntry, CallFacts
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_controller.service.http.app import ControllerApp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._vllm_launcher import load_launcher  # noqa: E402

TOPIC = "kv"
SYSTEM = "You are a careful agent. Tools:\n" + "\n".join(
    f"def tool_{i}(value_{i}, option_{i}=None):  # returns result_{i}" for i in range(24)
)


def start_servers(launcher: ModuleType, count: int, kv_cache_mib: int) -> list[dict[str, Any]]:
    python = launcher.find_vllm_python()
    if python is None:
        raise SystemExit("real vLLM not installed: run scripts/vllm/setup.sh")
    model_dir = launcher.ensure_model(python)
    ports = [(launcher.free_port(), launcher.free_port()) for _ in range(count)]
    options = []
    for events, replay in ports:
        config = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "topic": TOPIC,
            "endpoint": f"tcp://*:{events}",
            "replay_endpoint": f"tcp://*:{replay}",
        }
        options.append(
            launcher.ServerOptions(
                max_num_seqs=2,
                kv_cache_bytes=kv_cache_mib * 1024 * 1024,
                step_floor_ms=0,
                extra_args=("--max-model-len", "2048", "--kv-events-config", json.dumps(config)),
            )
        )
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(launcher.start_server, python, model_dir, o) for o in options]
        servers = [f.result() for f in futures]
    return [
        {"server": s, "events": f"tcp://127.0.0.1:{e}", "replay": f"tcp://127.0.0.1:{r}"}
        for s, (e, r) in zip(servers, ports, strict=True)
    ]


def words(rng: random.Random, count: int) -> str:
    return " ".join(f"w{rng.randrange(1000)}" for _ in range(count))


class Comparison:
    """Accumulates the per-lookup and per-call figures."""

    def __init__(self) -> None:
        self.lookups = 0
        self.agree = 0
        self.over = 0  # estimate > exact (claims blocks the engine does not hold)
        self.under = 0
        self.abs_diff_tokens = 0
        self.calls = 0
        self.changed = 0
        self.prompt_tokens = 0
        self.actual_cached = 0
        self.predicted = {"estimate": 0, "exact": 0}
        self.exact_right = {"estimate": 0, "exact": 0}
        self.unsynced_lookups = 0
        self.served: dict[str, int] = {}
        #: Calls the controller sent where the estimate's / the exact index's pick was.
        self.served_as = {"estimate": 0, "exact": 0}

    def record(self) -> dict[str, Any]:
        calls = max(1, self.calls)
        tokens = max(1, self.prompt_tokens)
        return {
            "lookups": self.lookups,
            "agreement": self.agree / max(1, self.lookups),
            "estimate_over": self.over,
            "estimate_under": self.under,
            "mean_abs_diff_tokens": self.abs_diff_tokens / max(1, self.lookups),
            "unsynced_lookups": self.unsynced_lookups,
            "calls": self.calls,
            "decisions_changed": self.changed,
            "hit_rate_vllm": self.actual_cached / tokens,
            "hit_rate_estimate": self.predicted["estimate"] / tokens,
            "hit_rate_exact": self.predicted["exact"] / tokens,
            "calls_predicted_to_the_block": {k: v / calls for k, v in self.exact_right.items()},
            "served": dict(sorted(self.served.items())),
            "served_as_picked_by": dict(self.served_as),
        }


def choose(
    scorer: PrefixCostScorer,
    affinity: AffinityScorer,
    call: CallEntry,
    views: list[BackendView],
    costs: list[float],
    now_s: float,
) -> str:
    """The prefix router's pick from ``costs`` (cost score + 0.2 x affinity; ties by id)."""
    soft = scorer.prefill_s_per_token * 16
    best = min(costs) + soft
    bound = affinity.score(call, views, now_s)
    totals = [best / (c + soft) + 0.2 * a for c, a in zip(costs, bound, strict=True)]
    top = max(totals)
    return min(v.backend_id for v, t in zip(views, totals, strict=True) if t == top)


async def settle(app: ControllerApp, quiet_s: float = 0.3) -> None:
    """Wait until the KV-event streams have been quiet for ``quiet_s`` (events applied)."""
    feed = app.core.kv_events
    assert feed is not None

    def applied() -> int:
        return sum(feed.index.stats(b).batches_applied for b in feed.index.backends())

    last, since = applied(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        await anyio.sleep(0.05)
        now = applied()
        if now != last:
            last, since = now, time.monotonic()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    launcher = load_launcher()
    started = start_servers(launcher, 2, args.kv_cache_mib)
    try:
        return await drive(args, started)
    finally:
        for entry in started:
            launcher.stop_server(entry["server"])


async def drive(args: argparse.Namespace, started: list[dict[str, Any]]) -> dict[str, Any]:
    specs = tuple(
        BackendSpec(
            e["server"].base_url,
            kind="vllm",
            backend_id=f"vllm{i}",
            kv_events=e["events"],
            kv_replay=e["replay"],
            kv_topic=TOPIC,
        )
        for i, e in enumerate(started)
    )
    model = started[0]["server"].model
    apps: list[ControllerApp] = []
    rng = random.Random(args.seed)
    result = Comparison()
    async with serve_controller(
        ControllerConfig(port=0, backends=specs, router="prefix"), on_app=apps.append
    ) as url:
        app = apps[0]
        engine = app.core
        feed = engine.kv_events
        assert feed is not None
        router: Any = engine.dispatcher.router
        scorer, affinity = router.scorers[0].scorer, router.scorers[1].scorer
        assert isinstance(scorer, PrefixCostScorer) and isinstance(affinity, AffinityScorer)
        deadline = time.monotonic() + 60
        while not all(feed.index.is_synced(s.backend_id) for s in specs):
            if time.monotonic() > deadline:
                raise SystemExit("the KV-event streams did not sync within 60 s")
            await anyio.sleep(0.1)
        histories = {p: [{"role": "system", "content": SYSTEM}] for p in range(args.programs)}
        async with httpx.AsyncClient(timeout=300.0) as http:
            step = 0
            for turn in range(args.turns):
                for program in range(args.programs):
                    step += 1
                    messages = histories[program]
                    messages.append({"role": "user", "content": f"turn {turn}: "
                                     + words(rng, args.user_words)})  # fmt: skip
                    body = {"model": model, "messages": messages, "max_tokens": args.max_tokens}
                    if args.foreign_every and step % args.foreign_every == 0:
                        if args.foreign_mode == "long":
                            text = words(rng, args.foreign_words)
                            foreign = {"model": model, "max_tokens": 2,
                                       "messages": [{"role": "user", "content": text}]}  # fmt: skip
                            target = started[0]["server"]
                        else:
                            foreign = {**body, "max_tokens": 2}
                            target = started[1]["server"]
                        direct = target.base_url + "/v1/chat/completions"
                        (await http.post(direct, json=foreign)).raise_for_status()
                    await settle(app)
                    answer = await one_call(http, url, app, scorer, affinity, body, program,
                                            turn, result)  # fmt: skip
                    messages.append({"role": "assistant", "content": answer})
    record = result.record()
    record["config"] = vars(args)
    record["index_bytes"] = feed.index.memory_bytes()
    record["stats"] = {b: asdict(feed.index.stats(b)) for b in feed.index.backends()}
    return record


async def one_call(
    http: httpx.AsyncClient,
    url: str,
    app: ControllerApp,
    scorer: PrefixCostScorer,
    affinity: AffinityScorer,
    body: dict[str, Any],
    program: int,
    turn: int,
    result: Comparison,
) -> str:
    engine = app.core
    feed = engine.kv_events
    assert feed is not None
    now = engine.now()
    tokenized = await http.post(
        engine.pool.states["vllm0"].backend.url + "/tokenize",
        json={"model": body["model"], "messages": body["messages"], "add_generation_prompt": True},
    )
    prompt_tokens = int(tokenized.json()["count"])
    facts = CallFacts(
        call_id=f"probe{program}-{turn}",
        program=ProgramKey.untagged(f"bench-program-{program}"),
        prompt_tokens=prompt_tokens,
        block_hashes=request_block_hashes(body),
    )
    call = CallEntry(await feed.fill_token_chain(facts, body))
    views = engine.pool.views()
    size = call.facts.token_block_size or 128
    estimate_costs = scorer.costs(call, views, now)
    exact_costs = scorer.exact_costs(call, views, estimate_costs)
    predicted: dict[str, dict[str, int]] = {}
    for view in views:
        matched = scorer.index.match(view.backend_id, call.facts.block_hashes, now)
        share = matched * prompt_tokens / max(1, len(call.facts.block_hashes))
        estimate = min(prompt_tokens, round(share))
        exact = scorer.exact_cached(call, view.backend_id)
        if exact is None:
            result.unsynced_lookups += 1
            exact = 0
        predicted[view.backend_id] = {"estimate": estimate, "exact": exact}
        result.lookups += 1
        result.abs_diff_tokens += abs(estimate - exact)
        if estimate // size == exact // size:
            result.agree += 1
        elif estimate > exact:
            result.over += 1
        else:
            result.under += 1
    picks = {
        "estimate": choose(scorer, affinity, call, views, estimate_costs, now),
        "exact": choose(scorer, affinity, call, views, exact_costs, now),
    }
    if picks["estimate"] != picks["exact"]:
        result.changed += 1
    before = {b: s.admitted_total for b, s in engine.pool.states.items()}
    headers = {HEADER_PROGRAM_ID: f"bench-program-{program}", HEADER_NODE_ID: f"main:{turn}"}
    response = await http.post(url + "/v1/chat/completions", json=body, headers=headers)
    response.raise_for_status()
    data = response.json()
    served = [b for b, s in engine.pool.states.items() if s.admitted_total > before[b]]
    usage = data["usage"]
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    result.calls += 1
    result.prompt_tokens += int(usage["prompt_tokens"])
    result.actual_cached += cached
    if len(served) == 1:
        result.served[served[0]] = result.served.get(served[0], 0) + 1
        for name, pick in picks.items():
            result.served_as[name] += pick == served[0]
        for name in ("estimate", "exact"):
            guess = predicted[served[0]][name]
            result.predicted[name] += guess
            if guess // size == cached // size:
                result.exact_right[name] += 1
    content: str = data["choices"][0]["message"]["content"] or ""
    return content


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=6)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--user-words", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--foreign-every", type=int, default=4, help="0 = no other client")
    parser.add_argument("--foreign-words", type=int, default=500)
    parser.add_argument("--foreign-mode", choices=("long", "duplicate"), default="long")
    parser.add_argument("--kv-cache-mib", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    record = asyncio.run(run(args))
    text = json.dumps(record, indent=2, default=str)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
