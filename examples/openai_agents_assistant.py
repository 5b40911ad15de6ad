"""An OpenAI Agents SDK agent with tools running as an agentrt program.

    .venv/bin/python examples/openai_agents_assistant.py        # embedded emulator + controller
    .venv/bin/python examples/openai_agents_assistant.py --base-url http://localhost:8080/v1

Needs the ``openai-agents`` extra (``pip install -e './adapters[openai-agents]'``). The agent's
model is the SDK's ``OpenAIResponsesModel`` (its default API; ``--api chat_completions`` for
``OpenAIChatCompletionsModel``) on the runtime's tagging client, handed out by
``agentrt_adapters.openai_agents``: every call carries the program's tags. Its function tools
are reported, so each execution is a tool wait the controller sees; the SDK's own tracing is
off (it would export to OpenAI's servers). While the agent runs, the example samples the
controller's process table and prints what it showed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _stack
from agents import Agent, ModelSettings

from agentrt import Runtime
from agentrt_adapters import AgentRun
from agentrt_adapters.openai_agents import function_tools, run_agent


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--max-turns", type=int, default=6, help="model calls at most")
    p.add_argument(
        "--api",
        choices=["responses", "chat_completions"],
        default="responses",
        help="the OpenAI API the agent's model speaks (default: the SDK's, responses)",
    )
    args = p.parse_args()

    agent = Agent(
        name="assistant",
        instructions="You are a careful assistant. Use tools when they help.",
        # The SDK hands a tool's exception back to the model as an error message.
        tools=function_tools([_common.calculator, _stack.slow_search]),
        model_settings=ModelSettings(max_tokens=256),
    )

    async def run(rt: Runtime) -> AgentRun:
        return await run_agent(
            rt,
            agent,
            _common.ASSISTANT_TASK,
            api=args.api,
            max_turns=args.max_turns,
            timeout_s=args.timeout_s,
        )

    # Embedded emulator + controller (or --base-url); prints the run and its process table.
    return await _stack.run_watched(args, run)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
