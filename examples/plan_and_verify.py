"""Plan with a large model, verify each step with a small one: one program, two models.

    .venv/bin/python examples/plan_and_verify.py             # two embedded engines + controller
    .venv/bin/python examples/plan_and_verify.py --base-url http://127.0.0.1:8080/v1 \\
        --planner my-org/planner --verifier my-org/verifier-3b --verifier my-org/verifier-1b

A planner model writes a plan; a small verifier model checks every step in parallel threads;
the planner then revises. Each call names its model (``agentrt.chat(model=...)``); the
verifier is given as an ordered list of candidates — the first one the controller serves
answers (a 404 "not served" or a 503 "no backend up" moves on to the next). The controller
routes each call only to backends serving its model, and the program stays one entry of its
process table whatever models it uses (docs/sdk.md, "Models"; docs/routing.md, "Several
models").
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

import agentrt
from agentrt import Runtime

PLANNER = "planner-8b"
VERIFIER = "verifier-1b"
#: Preferred first where deployed; the embedded stack serves only VERIFIER.
VERIFIER_LARGE = "verifier-3b"
TASK = "Plan a one-day trip to the coast for four people with a budget of 200 euros."


@asynccontextmanager
async def endpoint(args: argparse.Namespace) -> AsyncIterator[_common.Endpoint]:
    """``--base-url``, or one emulated engine per model behind an embedded controller; the
    runtime's default model is the planner (every call here names its own anyway)."""
    if args.base_url:
        # Models not named: the one the server serves plans and verifies (a one-model server).
        served = await _common.model_for(args)
        args.planner = args.planner or served
        args.verifier = args.verifier or [served]
        yield _common.Endpoint(args.base_url, args.planner, embedded=False)
        return
    args.planner = args.planner or PLANNER
    args.verifier = args.verifier or [VERIFIER_LARGE, VERIFIER]
    from agentrt_controller.backends.spec import BackendSpec
    from agentrt_controller.service import ControllerConfig, serve_controller
    from agentrt_emulator.server import EmulatorConfig, serve_engine

    scale = args.time_scale
    async with (
        serve_engine(EmulatorConfig(model_name=PLANNER, time_scale=scale)) as planner,
        serve_engine(EmulatorConfig(model_name=VERIFIER, time_scale=scale)) as verifier,
    ):
        backends = (
            BackendSpec.parse(f"{planner.base_url},kind=emulator,id=planner"),
            BackendSpec.parse(f"{verifier.base_url},kind=emulator,id=verifier"),
        )
        async with serve_controller(ControllerConfig(port=0, backends=backends)) as url:
            yield _common.Endpoint(url + "/v1", args.planner, embedded=True)


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument(
        "--planner",
        help=f"the planning model (embedded: {PLANNER}; with --base-url: --model, else the "
        "served one)",
    )
    p.add_argument(
        "--verifier",
        action="append",
        help=f"a verifier model; repeat for an ordered list of candidates (embedded: "
        f"{VERIFIER_LARGE}, then {VERIFIER}; with --base-url: as --planner)",
    )
    p.add_argument("--steps", type=int, default=4, help="plan steps to verify")
    args = p.parse_args()
    telemetry = _common.telemetry_for(args)
    table_sizes: list[int] = []

    async def verify(step: str) -> str:
        reply = await agentrt.chat(
            [
                {"role": "system", "content": "Is this step feasible and within budget? "
                 "Answer OK or a one-line problem."},
                {"role": "user", "content": step},
            ],
            model=args.verifier,
            max_tokens=24,
        )  # fmt: skip
        return reply.choices[0].message.content or ""

    async with endpoint(args) as where:
        verifiers = list(args.verifier)
        config = _common.runtime_config(args, where, telemetry)
        async with (
            Runtime(config) as rt,
            rt.program("plan-and-verify", timeout_s=args.timeout_s) as prog,
            httpx.AsyncClient(timeout=5) as http,
        ):
            plan = await agentrt.chat(
                [{"role": "user", "content": f"{TASK} Give {args.steps} numbered steps."}],
                model=args.planner,
                max_tokens=160,
            )
            text = plan.choices[0].message.content or ""
            steps = [line for line in text.splitlines() if line.strip()][: args.steps]
            steps += [f"step {i + 1}" for i in range(len(steps), args.steps)]

            async def checked(results: list[str]) -> str:
                table = await http.get(config.events_url + "/agentrt/v1/programs")
                if table.status_code == 200:
                    table_sizes.append(table.json()["programs"])
                notes = "\n".join(f"{s}: {r}" for s, r in zip(steps, results, strict=True))
                final = await agentrt.chat(
                    [{"role": "user", "content": f"{TASK}\nPlan:\n{text}\nChecks:\n{notes}\n"
                      "Revise the plan."}],
                    model=args.planner,
                    max_tokens=160,
                )  # fmt: skip
                return final.choices[0].message.content or ""

            revised = await agentrt.map_reduce(steps, verify, checked, limit=args.steps)
    nodes = prog.to_dict()["nodes"]
    by_model = Counter(node["name"] for node in nodes)
    tried = max(node["attempts"] for node in nodes)
    print(
        f"program {prog.id}: {prog.status}, {len(nodes)} LLM calls: "
        + ", ".join(f"{n} on {m}" for m, n in sorted(by_model.items()))
        + f" (verifier candidates {verifiers}; most requests for one call: {tried})"
    )
    if table_sizes:
        print(f"process table while it ran: {table_sizes[-1]} program entry for both models")
    print(f"revised plan: {revised[:300]}")
    return _common.finish(where, telemetry, filler="not real plans")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
