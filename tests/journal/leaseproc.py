"""One contender of the cross-process lease race (tests/journal/test_leases.py).

``python leaseproc.py URL SCHEMA PROGRAM GO_FILE``: connects, writes ``ready-<pid>`` next to
GO_FILE, waits until GO_FILE exists, tries to acquire PROGRAM's lease once and prints
``won <epoch>`` or ``held``. It exits without releasing, so the winner's lease stays live
while the others try.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agentrt.errors import ProgramLeaseHeld
from agentrt.journal import Journal


async def main(url: str, schema: str, program: str, go: Path) -> None:
    journal = Journal(url, schema=schema or None)
    await journal.connect()
    try:
        (go.parent / f"ready-{os.getpid()}").touch()
        deadline = time.monotonic() + 30
        while not await anyio.Path(go).exists():
            if time.monotonic() > deadline:
                raise SystemExit("no go signal")
            await anyio.sleep(0.002)
        try:
            lease = await journal.acquire_lease(program)
        except ProgramLeaseHeld:
            print("held")
        else:
            assert lease is not None
            print(f"won {lease.epoch}")
    finally:
        await journal.close()  # close, not release: the lease stays held


if __name__ == "__main__":
    url, schema, program, go = sys.argv[1:5]
    anyio.run(main, url, schema, program, Path(go))
