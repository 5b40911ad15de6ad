"""A LangGraph ReAct agent (langchain.agents.create_agent) running as an agentrt program.

    .venv/bin/python examples/langgraph_react.py        # embedded emulator + controller
    .venv/bin/python examples/langgraph_react.py --base-url http://localhost:8080/v1

Needs the ``langchain`` extra (``pip install -e './adapters[langchain]'``). The agent's model is a
``ChatOpenAI`` built by ``agentrt_adapters.langchain.chat_model``: every call carries the program's
tags. Its tools' executions are reported to the controller as tool waits. While the agent
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

from agentrt import Runtime
from agentrt_adapters import AgentRun
from agentrt_adapters.langchain import run_react_agent

TASK = (
    "Search the archive for the launch date of project Lighthouse, then compute how many "
    "days (17 * 23) + 4**3 is, and answer in one sentence."
)


@functools.wraps(_common.calculator)  # the same tool for the model: name, description, arguments
async def calculator(expression: str) -> str:
    # LangGraph's tool node stops the whole run on a tool exception (only bad arguments
    # go back to the model), so a tool's own failure is returned as text for the model.
    try:
        return await _common.calculator(expression)
    except ValueError as exc:
        return f"error: {exc}"


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--max-llm-calls", type=int, default=6)
    args = p.parse_args()

    async def agent(rt: Runtime) -> AgentRun:
        return await run_react_agent(
            rt,
            TASK,
            [_stack.slow_search, calculator],
            system="You are a careful assistant. Use tools when they help.",
            max_llm_calls=args.max_llm_calls,
            timeout_s=args.timeout_s,
        )

    # Embedded emulator + controller (or --base-url); prints the run and its process table.
    return await _stack.run_watched(args, agent)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
