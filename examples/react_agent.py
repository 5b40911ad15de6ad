"""A ReAct agent with two real tools: a calculator and a file writer (a side effect).

    .venv/bin/python examples/react_agent.py                       # embedded emulator
    .venv/bin/python examples/react_agent.py --base-url http://localhost:8000/v1

The file writer runs through the intent journal (a SQLite file next to the output): its
intent is recorded before it writes, it receives an idempotency key, and a re-run of the same
program (``--program-id``) replays finished steps instead of writing twice.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

import agentrt
from agentrt import IdempotencyKey, ReconcileResult, Runtime, ToolError, tool

TASK = (
    "What is (17 * 23) + 4**3? Use the calculator, then save the result with write_file to "
    "result.txt and tell me what you saved."
)


@tool
async def calculator(expression: str) -> float:
    """Evaluate an arithmetic expression.

    Args:
        expression: numbers with + - * / ** and parentheses, e.g. "(2 + 3) * 4"
    """
    try:
        return _common.evaluate(expression)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc


def make_writer(out_dir: Path) -> agentrt.Tool[str]:
    def target(name: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name)[:64] or "output.txt"
        return out_dir / safe

    async def already_written(key: str) -> ReconcileResult:
        # The file starts with its key, so an interrupted write can be recognised later.
        async for path in anyio.Path(out_dir).glob("*"):
            if await path.is_file() and (await path.read_text()).startswith(f"# {key}\n"):
                return ReconcileResult("done", f"wrote {path.name}")
        return ReconcileResult("not_done")

    @tool(side_effect=True, reconcile=already_written, timeout_s=10)
    async def write_file(filename: str, text: str, key: IdempotencyKey) -> str:
        """Write text to a file in the output directory (overwrites it).

        Args:
            filename: a plain file name such as "result.txt"
            text: the content to write
        """
        path = target(filename)
        await anyio.Path(path).write_text(f"# {key}\n{text}\n")
        return f"wrote {path.name}"

    return write_file


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--out-dir", default="example-output", help="where write_file writes")
    p.add_argument("--program-id", help="re-run (replay) a program with this id")
    p.add_argument("--max-steps", type=int, default=6)
    args = p.parse_args()
    out_dir = Path(await anyio.Path(args.out_dir).resolve())
    await anyio.Path(out_dir).mkdir(parents=True, exist_ok=True)
    telemetry = _common.telemetry_for(args)
    async with _common.endpoint(args) as where:
        config = _common.runtime_config(
            args, where, telemetry, journal=str(out_dir / "journal.sqlite")
        )
        async with (
            Runtime(config) as rt,
            rt.program("react-agent", program_id=args.program_id, timeout_s=args.timeout_s) as prog,
        ):
            result = await agentrt.react(
                TASK,
                [calculator, make_writer(out_dir)],
                system="You are a careful assistant. Use tools when they help.",
                max_steps=args.max_steps,
                max_tokens=256,
            )
    print(f"program {prog.id}: {prog.status}, {result.steps} LLM steps ({result.stop_reason})")
    for r in result.tool_results:
        print(f"  tool {r.name} [{r.node_id}]: {r.content[:80]}")
    print(f"answer: {(result.answer or '(none)')[:300]}")
    files = sorted([p.name async for p in anyio.Path(out_dir).iterdir()])
    print(f"files in {out_dir}: {files}")
    print("DAG (mermaid):")
    print(prog.to_mermaid())
    return _common.finish(where, telemetry)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
