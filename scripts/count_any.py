"""Count the annotations in function signatures (parameters and returns) that say ``Any``.

    python scripts/count_any.py            # one line per distribution

Used for the [core] issue's figures: how many signatures still say ``Any``.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

PACKAGES = {
    "controller": "controller/agentrt_controller",
    "sdk": "agentrt/agentrt",
    "adapters": "adapters/agentrt_adapters",
    "emulator": "emulator/agentrt_emulator",
    "simulator": "simulator/agentrt_sim",
    "serving": "serving/agentrt_serving",
    "demo": "demo/agentrt_demo",
}


def _any_in(node: ast.expr | None) -> int:
    """1 when the annotation mentions ``Any`` anywhere (``Mapping[str, Any]`` counts once)."""
    if node is None:
        return 0
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return 1
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return 1
        if (
            isinstance(sub, ast.Constant)
            and isinstance(sub.value, str)
            and re.search(r"\bAny\b", sub.value)
        ):
            return 1
    return 0


def count_file(path: Path) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    total = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
            every += [a for a in (args.vararg, args.kwarg) if a is not None]
            total += sum(_any_in(a.annotation) for a in every)
            total += _any_in(node.returns)
    return total


def main(root: Path) -> None:
    for name, folder in PACKAGES.items():
        files = sorted((root / folder).rglob("*.py"))
        print(f"{name:10s} {sum(count_file(f) for f in files):5d}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
