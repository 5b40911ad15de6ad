"""An AutoGen AssistantAgent with tools running as an agentrt program.

    .venv/bin/python examples/autogen_assistant.py        # embedded emulator + controller
    .venv/bin/python examples/autogen_assistant.py --base-url http://localhost:8080/v1

Needs the ``autogen`` extra (``pip install -e './adapters[autogen]'``). The agent's model client is
``agentrt_adapters.autogen.AgentrtChatCompletionClient``: AutoGen fixes headers when a client is
built, so the tags are added by the runtime's transport from the current program. Its tools
are wrapped by ``agentrt_adapters.autogen.agentrt_tools``, so each execution is reported to the
controller as a tool wait. While the agent runs, the example samples the controller's
process table and prints what it showed.
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
from agentrt_adapters.autogen import run_assistant_agent


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--max-tool-iterations", type=int, default=3)
    args = p.parse_args()

    async def agent(rt: Runtime) -> AgentRun:
        return await run_assistant_agent(
            rt,
            _common.ASSISTANT_TASK,
            # AutoGen hands a tool's exception back to the model as an error result.
            [_stack.slow_search, _common.calculator],
            system="You are a careful assistant. Use tools when they help.",
            max_tool_iterations=args.max_tool_iterations,
            timeout_s=args.timeout_s,
        )

    # Embedded emulator + controller (or --base-url); prints the run and its process table.
    return await _stack.run_watched(args, agent)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
