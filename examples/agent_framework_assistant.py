"""A Microsoft Agent Framework agent with tools running as an agentrt program.

    .venv/bin/python examples/agent_framework_assistant.py        # embedded emulator + controller
    .venv/bin/python examples/agent_framework_assistant.py --base-url http://localhost:8080/v1

Needs the ``agent-framework`` extra (``pip install -e './adapters[agent-framework]'``). The
agent's chat client is ``agentrt_adapters.agent_framework.AgentrtChatClient``: the framework's
OpenAI chat completion client on the runtime's tagging transport, so every model call carries
the program's tags. Its function middleware reports each tool execution to the controller as
a tool wait. While the agent runs, the example samples the controller's process table and
prints what it showed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common
import _stack

from agentrt import Runtime
from agentrt_adapters import AgentRun
from agentrt_adapters.agent_framework import run_chat_agent


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--max-tool-iterations", type=int, default=3)
    args = p.parse_args()

    async def agent(rt: Runtime) -> AgentRun:
        return await run_chat_agent(
            rt,
            _common.ASSISTANT_TASK,
            # Agent Framework hands a tool's exception back to the model as an error result.
            [_stack.slow_search, _common.calculator],
            system="You are a careful assistant. Use tools when they help.",
            max_tool_iterations=args.max_tool_iterations,
            timeout_s=args.timeout_s,
        )

    # Embedded emulator + controller (or --base-url); prints the run and its process table.
    return await _stack.run_watched(args, agent)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
