"""``agentrt journal`` commands against a real journal file."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from agentrt.cli import main
from agentrt.errors import UnknownOutcome
from agentrt.journal import Journal, StepSpec
from agentrt.journal.cli import parse_duration_s

pytestmark = pytest.mark.timeout(30)


async def _fill(path: Path) -> str:
    async def ok(key: str) -> dict[str, str]:
        return {"secret": "user data"}

    async def crash(key: str) -> None:
        raise UnknownOutcome("crash", key=key)

    async with Journal(str(path)) as journal:
        for seq in range(2):
            await journal.run_step(
                StepSpec("prog-a", "main", seq, "tool", "send", {"n": seq}, side_effect=True), ok
            )
        await journal.run_step(StepSpec("prog-b", "main", 0, "llm", "model", {}), ok)
        with pytest.raises(UnknownOutcome) as caught:
            await journal.run_step(
                StepSpec("prog-b", "main", 1, "tool", "pay", {}, side_effect=True), crash
            )
        await journal.record_tool_duration("send", 0.25)
    return caught.value.key


@pytest.fixture
def journal_file(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "j.sqlite"
    key = anyio.run(_fill, path)
    return path, key


def test_list_and_status_filter(
    journal_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = journal_file
    assert main(["journal", "list", "--url", str(path), "--json"]) == 0
    listed = {p["program_id"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["prog-a"]["committed"] == 2 and listed["prog-b"]["started"] == 1
    assert main(["journal", "list", "--url", str(path), "--status", "STARTED"]) == 0
    out = capsys.readouterr().out
    assert "prog-b" in out and "prog-a" not in out


def test_show_hides_results_unless_asked(
    journal_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = journal_file
    assert main(["journal", "show", "prog-a", "--url", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tool:send" in out and "COMMITTED" in out and "user data" not in out
    assert main(["journal", "show", "prog-a", "--url", str(path), "--json", "--results"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [s["result"] for s in shown["steps"]] == [{"secret": "user data"}] * 2
    assert main(["journal", "show", "nope", "--url", str(path)]) == 1


def test_resolve_purge_and_durations(
    journal_file: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, key = journal_file
    url = ["--url", str(path)]
    assert main(["journal", "resolve", key, "--done", "--result", '{"paid": true}', *url]) == 0
    assert "COMMITTED" in capsys.readouterr().out
    assert main(["journal", "resolve", key, "--not-done", *url]) == 1  # no longer unknown
    assert "not an unknown outcome" in capsys.readouterr().err
    assert main(["journal", "durations", "send", "--json", *url]) == 0
    assert json.loads(capsys.readouterr().out)["predicted_s"] == 0.25
    assert main(["journal", "purge", "--older-than", "0s", "--dry-run", *url]) == 0
    assert "would delete 2 programs (4 steps)" in capsys.readouterr().out
    assert main(["journal", "purge", "--program", "prog-a", *url]) == 0
    assert "deleted 1 programs (2 steps)" in capsys.readouterr().out


def test_missing_journal_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["journal", "list", "--url", str(tmp_path / "none.sqlite")]) == 1
    assert "no journal database at" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()


def test_parse_duration() -> None:
    assert [parse_duration_s(t) for t in ("90", "90s", "15m", "2h", "7d", "1.5h")] == [
        90.0,
        90.0,
        900.0,
        7200.0,
        604800.0,
        5400.0,
    ]
    with pytest.raises(Exception, match="not a duration"):
        parse_duration_s("soon")


async def _hold_lease(path: Path) -> str:
    """A program whose holder 'died' holding its lease (closed without releasing)."""

    async def ok(key: str) -> str:
        return "sent"

    journal = Journal(str(path))
    try:
        await journal.acquire_lease("prog-l")
        await journal.run_step(
            StepSpec("prog-l", "main", 0, "tool", "send", {}, side_effect=True), ok
        )
    finally:
        await journal.close()
    return journal.owner


def test_leases_are_listed_shown_and_broken_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "j.sqlite"
    owner = anyio.run(_hold_lease, path)
    url = ["--url", str(path)]
    assert main(["journal", "list", "--json", *url]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["lease"]["state"] == "held" and listed["lease"]["epoch"] == 1
    assert owner in listed["lease"]["holder"]
    assert main(["journal", "show", "prog-l", *url]) == 0
    assert f"lease: held by {listed['lease']['holder']} (epoch 1) until" in capsys.readouterr().out
    assert main(["journal", "release-lease", "prog-l", *url]) == 2  # no --yes: nothing broken
    assert "pass --yes" in capsys.readouterr().err
    assert main(["journal", "release-lease", "prog-l", "--yes", *url]) == 0
    assert "epoch now 2" in capsys.readouterr().out
    assert main(["journal", "show", "prog-l", "--json", *url]) == 0
    lease = json.loads(capsys.readouterr().out)["lease"]
    assert (lease["state"], lease["epoch"]) == ("released", 2)
    assert main(["journal", "list", *url]) == 0
    assert "released (epoch 2)" in capsys.readouterr().out
    assert main(["journal", "release-lease", "nope", "--yes", *url]) == 1
