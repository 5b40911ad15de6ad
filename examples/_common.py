"""Shared plumbing of the examples: command line, the embedded engine emulator, the runtime.

Without ``--base-url`` an engine emulator is started in-process (its scripted model writes
filler text and schema-valid tool calls, so the programs run end to end but say nothing);
with ``--base-url`` the example talks to any OpenAI-compatible server (vLLM, our controller),
using the model it serves (``GET /v1/models``) unless ``--model`` names one.
"""

from __future__ import annotations

import argparse
import ast
import operator
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from agentrt import AgentrtError, RuntimeConfig, Telemetry, discover_model, make_telemetry


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=description,
        epilog="With only --base-url the example uses the model the server lists at "
        "GET <base-url>/models (the first of several, named on stderr).",
    )
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible endpoint ending in /v1, e.g. http://127.0.0.1:8080/v1 "
        "(default: an embedded engine emulator)",
    )
    p.add_argument(
        "--model",
        help="model name (default: the one the server serves, from GET <base-url>/models)",
    )
    p.add_argument("--api-key", default="EMPTY")
    p.add_argument(
        "--controller",
        choices=["auto", "required", "off"],
        default="auto",
        help="talk to an agentrt controller at --base-url (auto: when there is one)",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=50.0,
        help="embedded emulator: run this many times faster than the modelled GPU",
    )
    p.add_argument(
        "--trace",
        choices=["none", "console"],
        default="none",
        help="print OpenTelemetry spans and metrics to the console",
    )
    p.add_argument("--timeout-s", type=float, default=120.0, help="program deadline, seconds")
    return p


@dataclass
class Endpoint:
    base_url: str
    model: str
    embedded: bool


@asynccontextmanager
async def endpoint(args: argparse.Namespace) -> AsyncIterator[Endpoint]:
    """The server to talk to: ``--base-url`` or an embedded engine emulator."""
    if args.base_url:
        yield Endpoint(args.base_url, await model_for(args), embedded=False)
        return
    from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine

    async with serve_engine(EmulatorConfig(time_scale=args.time_scale)) as engine:
        yield Endpoint(engine.openai_base_url, args.model or DEFAULT_MODEL_NAME, embedded=True)


async def model_for(args: argparse.Namespace) -> str:
    """``--model``, else the model ``--base-url`` serves; exits with the reason (the URL and
    the fix) when the server cannot tell."""
    if args.model:
        return str(args.model)
    try:
        model = await discover_model(args.base_url, args.api_key)
    except AgentrtError as exc:
        raise SystemExit(f"error: {exc}") from exc
    print(f"model: {model} (served by {args.base_url})", file=sys.stderr)
    return model


def runtime_config(
    args: argparse.Namespace, where: Endpoint, telemetry: Telemetry | None, **extra: Any
) -> RuntimeConfig:
    return RuntimeConfig(
        base_url=where.base_url,
        api_key=args.api_key,
        model=where.model,
        controller=args.controller,
        tracer_provider=telemetry.tracer_provider if telemetry else None,
        meter_provider=telemetry.meter_provider if telemetry else None,
        **extra,
    )


def telemetry_for(args: argparse.Namespace) -> Telemetry | None:
    return make_telemetry("console") if args.trace == "console" else None


def finish(where: Endpoint, telemetry: Telemetry | None, filler: str = "not real answers") -> int:
    """An example's last words: note that the embedded emulator's text is filler (how that
    shows in this example's output: ``filler``), flush telemetry. Returns exit status 0."""
    if where.embedded:
        print(f"(embedded emulator: its scripted model writes filler, {filler})")
    if telemetry:
        telemetry.shutdown()
    return 0


#: The task of the framework assistant examples (tools: ``_stack.slow_search``, :func:`calculator`).
ASSISTANT_TASK = (
    "When did project Lighthouse launch? Search the archive first; if you need arithmetic, "
    "use the calculator. Answer in one sentence."
)


async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: numbers with + - * / ** and parentheses, e.g. "(2 + 3) * 4"
    """
    # A demo tool of the framework examples (its docstring is what the model is told). Raises
    # ValueError for anything but arithmetic: each example says how its framework handles that.
    return str(evaluate(expression))


_OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def evaluate(expression: str) -> float:
    """Evaluate an arithmetic expression (numbers, + - * / ** and parentheses) safely.

    Raises ValueError for anything else."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not an arithmetic expression: {expression[:60]!r}") from exc

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            try:
                return float(_OPERATORS[type(node.op)](left, right))
            except ZeroDivisionError as exc:
                raise ValueError("division by zero") from exc
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return float(_OPERATORS[type(node.op)](walk(node.operand)))
        raise ValueError(f"not an arithmetic expression: {expression[:60]!r}")

    return walk(tree)


def numbers_in(expression: str) -> list[int]:
    """The integer literals of an arithmetic expression, in order."""
    tree = ast.parse(expression.strip(), mode="eval")
    return [
        int(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, int)
    ]
