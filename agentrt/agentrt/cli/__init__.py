"""The ``agentrt`` console command.

Every agentrt distribution contributes its subcommands through the ``agentrt.commands``
entry-point group: an entry point names a ``register(subparsers)`` function that adds one or more
command groups (the SDK itself contributes ``journal``). Registering is cheap: heavy imports
happen inside each command's handler, so ``agentrt --help`` stays fast.

A command whose distribution is not installed still appears in ``--help``; running it says in one
line which distribution to install and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from importlib.metadata import EntryPoint
from typing import Any

from agentrt._version import __version__
from agentrt.cli.output import closed_pipe_safe

__all__ = ["COMMAND_GROUP", "KNOWN_COMMANDS", "build_parser", "main"]

#: The entry-point group each distribution registers its subcommands in.
COMMAND_GROUP = "agentrt.commands"

#: The commands of the agentrt distributions, in the order ``--help`` lists them:
#: command -> (distribution that provides it, one-line help when it is absent).
KNOWN_COMMANDS: dict[str, tuple[str, str]] = {
    "engine": ("agentrt-emulator", "run the vLLM-compatible engine emulator"),
    "controller": ("agentrt-controller", "run the program controller"),
    "bench": ("agentrt-sim", "simulate and benchmark scheduling policies"),
    "trace": ("agentrt-sim", "convert recorded traces into simulator traces"),
    "journal": ("agentrt", "inspect and repair an intent journal"),
    "demo": ("agentrt-demo", "run the demo"),
    "timeline": ("agentrt-demo", "draw a program timeline from a trace file"),
}

#: Entry-point names of the agentrt distributions, in the order they register.
_ENTRY_POINT_ORDER = ("engine", "controller", "bench", "trace", "journal", "demo")

Handler = Callable[[argparse.Namespace], int]


def _ordered(found: Iterable[EntryPoint]) -> list[EntryPoint]:
    rank = {name: index for index, name in enumerate(_ENTRY_POINT_ORDER)}
    return sorted(found, key=lambda ep: (rank.get(ep.name, len(rank)), ep.name))


def _installed_entry_points() -> list[EntryPoint]:
    return list(metadata.entry_points(group=COMMAND_GROUP))


def _missing_handler(command: str, distribution: str) -> Handler:
    def handler(args: argparse.Namespace) -> int:
        print(
            f"agentrt {command}: this command comes with the {distribution} distribution, "
            f"which is not installed (pip install {distribution})",
            file=sys.stderr,
        )
        return 2

    return handler


def build_parser(entry_points: Iterable[EntryPoint] | None = None) -> argparse.ArgumentParser:
    """The whole ``agentrt`` parser: every installed command, and a stub for each absent one.

    ``entry_points`` are the ``agentrt.commands`` entry points to register (default: those of
    the installed distributions).
    """
    if entry_points is None:
        entry_points = _installed_entry_points()
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
    for entry_point in _ordered(entry_points):
        register: Callable[[Any], None] = entry_point.load()
        register(subparsers)
    present = set(subparsers.choices)
    for command, (distribution, summary) in KNOWN_COMMANDS.items():
        if command in present:
            continue
        stub = subparsers.add_parser(
            command,
            help=f"{summary} (needs {distribution})",
            description=f"Not installed: pip install {distribution}",
            add_help=False,
        )
        stub.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        stub.set_defaults(handler=_missing_handler(command, distribution))
    return parser


def main(
    argv: Sequence[str] | None = None, *, entry_points: Iterable[EntryPoint] | None = None
) -> int:
    """Run the ``agentrt`` command; its exit status. Whatever it prints survives a closed
    pipe (``agentrt ... --json | head -1``: status 141, no traceback; agentrt.cli.output)."""
    return closed_pipe_safe(lambda: _main(argv, entry_points))


def _main(argv: Sequence[str] | None, entry_points: Iterable[EntryPoint] | None) -> int:
    parser = build_parser(entry_points)
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
