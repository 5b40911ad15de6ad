"""Printing to a pipe that may close: ``agentrt ... --json | head -1`` must end quietly.

When the reader of our standard output goes away, the next write raises ``BrokenPipeError``
(Python ignores SIGPIPE). :func:`closed_pipe_safe` runs a command's handler and turns that
into the exit status a shell gives a program killed by SIGPIPE (141), without a traceback —
neither from the handler nor from the interpreter's final flush of ``sys.stdout``, which
would fail the same way (the stream is pointed at ``os.devnull`` first).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["EXIT_CLOSED_PIPE", "closed_pipe_safe", "silence_stdout"]

#: Exit status after the output pipe closed: 128 + SIGPIPE (13), what a shell reports.
EXIT_CLOSED_PIPE = 141


def silence_stdout() -> None:
    """Send whatever is still buffered for ``sys.stdout``, and all later output, to
    ``os.devnull``: the reader is gone, and the interpreter's flush at exit must not fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (tests' capture)
        pass


def closed_pipe_safe(run: Callable[[], int]) -> int:
    """``run()``'s exit status; :data:`EXIT_CLOSED_PIPE` (quietly) when standard output's
    reader closed the pipe while it ran (also when it ends by ``SystemExit``, as ``--help``
    does: the flush that would fail at exit happens here)."""
    try:
        try:
            status = run()
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        return EXIT_CLOSED_PIPE
    return status
