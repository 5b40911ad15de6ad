"""``bench replay`` against a keyed server: the key goes on every request, the probe's too."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrt_sim.replay.cli import add_parser
from agentrt_sim.replay.runner import ReplayConfig, replay
from agentrt_sim.replay.server import ReplayError

from .helpers import recording_emulator, small_trace

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

KEY = "replay-secret"


class KeyedServer:
    """ASGI middleware: 401 for any HTTP request without ``Authorization: Bearer KEY``;
    records each path with the authorization it carried."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, str | None]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.seen.append((scope["path"], headers.get("authorization")))
        if headers.get("authorization") == f"Bearer {KEY}":
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": {"message": "bad key"}}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def test_the_key_goes_on_the_probe_the_calls_and_the_scrapes() -> None:
    keyed: list[KeyedServer] = []

    def wrap(app: Any) -> KeyedServer:
        keyed.append(KeyedServer(app))
        return keyed[0]

    async with recording_emulator(10.0, wrap=wrap) as emulator:
        config = ReplayConfig(emulator.openai_base_url, time_scale=10.0, api_key=KEY)
        result, facts = await replay(small_trace(), config)
    assert all(p.error is None for p in result.programs), [p.error for p in result.programs]
    assert facts.costs.measured and facts.ignore_eos  # the probe got through
    paths = {path for path, _ in keyed[0].seen}
    assert {"/v1/models", "/tokenize", "/v1/chat/completions", "/metrics"} <= paths
    assert all(auth == f"Bearer {KEY}" for _, auth in keyed[0].seen), keyed[0].seen
    calls = emulator.recorder.tagged()
    assert calls and all(
        m["content"] for seen in calls for m in seen.body["messages"]
    )  # no empty content


async def test_a_replay_without_the_key_is_refused_before_any_program() -> None:
    async with recording_emulator(10.0, wrap=KeyedServer) as emulator:
        config = ReplayConfig(emulator.openai_base_url, time_scale=10.0, api_key="wrong")
        with pytest.raises(ReplayError, match="401"):
            await replay(small_trace(), config)
        assert emulator.recorder.tagged() == []


def _parsed(argv: list[str]) -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["replay", "--trace", "t", "--base-url", "http://h/v1", *argv])


def test_the_cli_key_defaults_to_openai_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrt_sim.replay.cli import api_key_of

    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert api_key_of(_parsed([])) == "from-env"
    assert api_key_of(_parsed(["--api-key", "flag"])) == "flag"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert api_key_of(_parsed([])) == "EMPTY"
