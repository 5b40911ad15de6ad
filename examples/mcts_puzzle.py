"""MCTS (LATS) solver of a small puzzle: make 24 from four numbers with + - * / and
parentheses, each number used exactly once.

    .venv/bin/python examples/mcts_puzzle.py                          # embedded emulator
    .venv/bin/python examples/mcts_puzzle.py --base-url URL --numbers 3 3 8 8

Each expansion proposes ``n`` next steps in parallel (one program thread each), grades them
with the LLM (JSON-schema ``response_format``), and reflects on failed attempts; a proposed
``Answer: <expression>`` is checked exactly by ``verify``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

import agentrt
from agentrt import Runtime


def solves(steps: Sequence[str], numbers: Sequence[int], target: int) -> bool:
    """True when the last step is ``Answer: <expr>``, ``expr`` uses exactly ``numbers`` and
    evaluates to ``target``."""
    match = re.search(r"answer\s*:\s*(.+)", steps[-1], flags=re.IGNORECASE) if steps else None
    if not match:
        return False
    expression = match.group(1).split("=")[0].strip()
    try:
        value = _common.evaluate(expression)
        used = _common.numbers_in(expression)
    except (ValueError, SyntaxError):
        return False
    return sorted(used) == sorted(numbers) and abs(value - target) < 1e-9


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--numbers", type=int, nargs=4, default=[4, 7, 8, 8])
    p.add_argument("--target", type=int, default=24)
    p.add_argument("--n", type=int, default=3, help="children per expansion")
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--iterations", type=int, default=6)
    args = p.parse_args()
    numbers, target = args.numbers, args.target
    task = (
        f"Make {target} from the numbers {' '.join(map(str, numbers))} using + - * / and "
        "parentheses, each number exactly once. Work one operation per step; finish with "
        "'Answer: <expression>'."
    )
    telemetry = _common.telemetry_for(args)
    async with _common.endpoint(args) as where:
        config = _common.runtime_config(args, where, telemetry)
        async with Runtime(config) as rt, rt.program("24-game", timeout_s=args.timeout_s) as prog:
            result = await agentrt.mcts(
                task,
                n=args.n,
                depth=args.depth,
                iterations=args.iterations,
                verify=lambda steps: solves(steps, numbers, target),
            )
    threads = {n.thread_id for n in prog.nodes.values()}
    print(
        f"{'solved' if result.solved else 'not solved'} after {result.iterations} expansions; "
        f"tree of {result.tree_size} nodes, {len(prog.nodes)} LLM calls in {len(threads)} "
        f"threads, program {prog.status}"
    )
    for i, step in enumerate(result.steps, 1):
        print(f"  {i}. {step[:120]}")
    for lesson in result.reflections[:3]:
        print(f"  lesson: {lesson[:120]}")
    return _common.finish(where, telemetry, filler="so nothing gets solved")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
