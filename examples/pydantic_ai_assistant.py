"""A Pydantic AI agent with tools running as an agentrt program.

    .venv/bin/python examples/pydantic_ai_assistant.py        # embedded emulator + controller
    .venv/bin/python examples/pydantic_ai_assistant.py --base-url http://localhost:8080/v1

Needs the ``pydantic-ai`` extra (``pip install -e './adapters[pydantic-ai]'``). The agent runs on
Pydantic AI's ``OpenAIChatModel`` (``--api responses`` for ``OpenAIResponsesModel``) over an
``OpenAIProvider`` holding the runtime's tagging client, handed out by
``agentrt_adapters.pydantic_ai``: every request carries the program's tags. The adapter's
capability reports each tool execution to the controller as a tool wait. While the agent
runs, the example samples the controller's process table and prints what it showed.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _stack
from pydantic_ai import Agent, ModelRetry

from agentrt import Runtime
from agentrt_adapters import AgentRun
from agentrt_adapters.pydantic_ai import run_agent


@functools.wraps(_common.calculator)  # the same tool for the model: name, description, arguments
async def calculator(expression: str) -> str:
    try:
        return await _common.calculator(expression)
    except ValueError as exc:
        # Pydantic AI sends a ModelRetry back to the model (an uncaught error ends the run).
        raise ModelRetry(str(exc)) from exc


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--max-requests", type=int, default=6, help="model requests at most")
    p.add_argument(
        "--api",
        choices=["chat_completions", "responses"],
        default="chat_completions",
        help="the OpenAI API the agent's model speaks (default: chat_completions)",
    )
    args = p.parse_args()

    agent = Agent(
        name="assistant",
        instructions="You are a careful assistant. Use tools when they help.",
        tools=[_stack.slow_search, calculator],
        model_settings={"max_tokens": 256},
    )

    async def run(rt: Runtime) -> AgentRun:
        return await run_agent(
            rt,
            agent,
            _common.ASSISTANT_TASK,
            api=args.api,
            max_requests=args.max_requests,
            timeout_s=args.timeout_s,
        )

    # Embedded emulator + controller (or --base-url); prints the run and its process table.
    return await _stack.run_watched(args, run)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
