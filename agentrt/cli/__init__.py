"""The ``agentrt`` console command.

Each subcommand lives next to the code it drives, in a small ``cli`` module exposing
``register(subparsers)``; heavy imports happen inside the command's handler so that
``agentrt --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from agentrt import __version__

__all__ = ["main"]

#: (module, description) for each command group, in the order ``--help`` shows them.
_COMMAND_MODULES: tuple[str, ...] = (
    "emulator.cli",
    "controller.cli",
    "simulator.cli",
    "agentrt.journal.cli",
    "agentrt.demo.cli",
)

Handler = Callable[[argparse.Namespace], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentrt",
        description=(
            "agentrt: program-aware runtime for LLM agents. Run the engine emulator, the program "
            "controller, the simulator and benchmarks, inspect the journal, or run the demo."
        ),
        epilog="Run 'agentrt COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"agentrt {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in _COMMAND_MODULES:
        module = importlib.import_module(module_name)
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
