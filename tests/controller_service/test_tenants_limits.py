"""Tenants' key files, quotas and the controller's caps, over real HTTP on loopback.

Key files that do not parse or repeat a key or a tenant stop the controller, naming the file
and the line; over a quota a tenant gets 429 with ``Retry-After`` (or waits, ``queue``); the
process table is capped (idle programs evicted first, else 503); a tool wait's predicted
duration is clamped; ``GET /programs`` pages are bounded and walk with a cursor.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import anyio
import httpx
import pytest

from agentrt.cli import main
from agentrt.errors import ConfigError
from agentrt.protocol import EVENTS_PREFIX, CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, load_config
from agentrt_controller.service.core.tenants import build_directory, hash_key
from tests.controller_service.conftest import chat_body, controller, fake_backends
from tests.controller_service.fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

EV = EVENTS_PREFIX
ALICE = {"authorization": "Bearer key-alice-0001"}
H_ALICE = hash_key("key-alice-0001")
H_BOB = hash_key("key-bob-0002")


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "keys.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _tags(program_id: str, node: str = "n1") -> dict[str, str]:
    return CallTags(
        program_id=program_id, session_id="s", thread_id="main", node_id=node
    ).to_headers()


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('[tenants.alice]\nkeys = ["sha256:00"] x\n', 2, "Expected newline"),
        ('[tenants.alice]\nkeys = ["sha256:00"\n', 2, "Unclosed array"),
        (f'[tenants.alice]\nkeys = ["{H_ALICE}"]\n\n[tenants.bob]\nkeys = ["{H_ALICE}"]\n', 5,
         "repeated (first at line 2)"),
        (f'[tenants.alice]\nkeys = ["{H_ALICE}"]\n[tenants.alice]\nkeys = ["{H_BOB}"]\n', 3,
         "twice"),
        (f'[tenants.alice]\nkeys = ["{H_ALICE}"]\nweigth = 2\n', 3, "unknown tenant field"),
        ('# keys\n[tenants.alice]\nkeys = ["plain-key"]\n', 3, "sha256:<64"),
        (f'[defaults]\nmax_in_fligth = 3\n[tenants.a]\nkeys = ["{H_ALICE}"]\n', 2,
         "unknown quota field"),
        (f'[tenants.alice]\nkeys = ["{H_ALICE}"]\nover_quota = "later"\n', 1, "over_quota"),
    ],
)  # fmt: skip
def test_a_bad_key_file_stops_the_controller_naming_file_and_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = _file(tmp_path, text)
    config = ControllerConfig(backends=(BackendSpec("http://127.0.0.1:9"),), api_key_file=path)
    with pytest.raises(ConfigError) as caught:
        ControllerApp(config)
    message = str(caught.value)
    assert path in message and words in message
    assert f"line {line}" in message, message


def test_keys_from_the_environment_and_repeated_keys_across_sources(tmp_path: Path) -> None:
    env = {"AGENTRT_CONTROLLER_API_KEYS": "alice=k-one-1, bob=" + H_BOB}
    directory = build_directory(
        key_file=None, key_list=load_config(env=env).api_keys, single_key=None
    )
    assert directory.authenticate("Bearer k-one-1") is not None
    assert directory.authenticate("bearer key-bob-0002").name == "bob"  # type: ignore[union-attr]
    assert directory.authenticate("Bearer k-one-2") is None
    assert "k-one-1" not in repr(load_config(env=env))  # keys stay out of reprs
    with pytest.raises(ConfigError, match="entry 2: key repeated"):
        build_directory(key_file=None, key_list="a=k-same-1,b=k-same-1", single_key=None)
    path = _file(tmp_path, f'[tenants.alice]\nkeys = ["{H_ALICE}"]\n')
    with pytest.raises(ConfigError, match="also a key of 'alice'"):
        build_directory(key_file=path, key_list="eve=key-alice-0001", single_key=None)


async def test_in_flight_quota_rejects_with_retry_after_or_queues(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        f'[tenants.alice]\nkeys = ["{H_ALICE}"]\nmax_in_flight = 1\n'
        f'[tenants.bob]\nkeys = ["{H_BOB}"]\nmax_in_flight = 1\nover_quota = "queue"\n',
    )
    bob = {"authorization": "Bearer key-bob-0002"}
    state = FakeState(gate=anyio.Event())
    async with (
        fake_backends(state) as urls,
        controller(urls, api_key_file=path) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        answers: dict[str, httpx.Response] = {}

        async def call(name: str, auth: dict[str, str]) -> None:
            answers[name] = await http.post(url + "/v1/chat/completions", json=chat_body(),
                                            headers=auth)  # fmt: skip

        async with anyio.create_task_group() as group:
            group.start_soon(call, "alice-1", ALICE)
            group.start_soon(call, "bob-1", bob)
            while state.active < 2:  # noqa: ASYNC110 (the fake server offers no event)
                await anyio.sleep(0.01)
            await call("alice-2", ALICE)  # over quota: refused at once
            group.start_soon(call, "bob-2", bob)  # over quota: waits for bob-1
            await anyio.sleep(0.3)
            assert "bob-2" not in answers and state.active == 2
            assert state.gate is not None
            state.gate.set()
        metrics = (await http.get(url + "/metrics")).text
    refused = answers["alice-2"]
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["error"]["code"] == "in_flight_quota"
    assert [answers[n].status_code for n in ("alice-1", "bob-1", "bob-2")] == [200, 200, 200]
    assert 'agentrt_controller_tenant_refusals_total{status="429",tenant="alice"} 1' in metrics


async def test_tokens_per_minute_and_program_quotas(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        f'[tenants.alice]\nkeys = ["{H_ALICE}"]\ntokens_per_minute = 60\nmax_programs = 2\n',
    )
    state = FakeState(tokens=100)  # one answer uses more than a minute's tokens
    async with (
        fake_backends(state) as urls,
        controller(urls, api_key_file=path) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        first = await http.post(url + "/v1/chat/completions", json=chat_body(),
                                headers={**ALICE, **_tags("p1")})  # fmt: skip
        second = await http.post(url + "/v1/chat/completions", json=chat_body(),
                                 headers={**ALICE, **_tags("p1", "n2")})  # fmt: skip
        starts = [
            await http.post(
                url + EV + f"/programs/{pid}/start", json={"session_id": "s"}, headers=ALICE
            )
            for pid in ("p2", "p3")
        ]
        metrics = (await http.get(url + "/metrics")).text
    assert first.status_code == 200
    assert second.status_code == 429
    assert second.json()["error"]["code"] == "tokens_per_minute_quota"
    assert int(second.headers["retry-after"]) >= 41  # 100 + prompt tokens - 60 left, 1/s
    assert [s.status_code for s in starts] == [200, 429]
    assert starts[1].json()["error"]["code"] == "programs_quota"
    assert "retry-after" in starts[1].headers
    assert 'agentrt_controller_tenant_tokens_total{kind="output",tenant="alice"} 100' in metrics


async def test_program_wall_time_quota(tmp_path: Path) -> None:
    path = _file(tmp_path, f'[tenants.alice]\nkeys = ["{H_ALICE}"]\nmax_program_wall_s = 0.3\n')
    async with (
        fake_backends(FakeState()) as urls,
        controller(urls, api_key_file=path) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        early = await http.post(url + "/v1/chat/completions", json=chat_body(),
                                headers={**ALICE, **_tags("long")})  # fmt: skip
        await anyio.sleep(0.4)
        late = await http.post(url + "/v1/chat/completions", json=chat_body(),
                               headers={**ALICE, **_tags("long", "n2")})  # fmt: skip
    assert early.status_code == 200
    assert late.status_code == 429
    assert late.json()["error"]["code"] == "program_wall_time_quota"


async def test_the_process_table_cap_evicts_idle_programs_first_then_answers_503() -> None:
    state = FakeState()
    async with (
        fake_backends(state) as urls,
        controller(urls, max_programs=2) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        for pid in ("a", "b", "c"):  # idle programs: the oldest makes room
            start = await http.post(url + EV + f"/programs/{pid}/start", json={"session_id": "s"})
            assert start.status_code == 200
        table_keys = app.core.dispatcher.table.keys()
        live = sorted(k.program_id for k in table_keys)
        state.gate = anyio.Event()
        answers: list[httpx.Response] = []

        async def call(pid: str) -> None:
            answers.append(await http.post(url + "/v1/chat/completions", json=chat_body(),
                                           headers=_tags(pid)))  # fmt: skip

        async with anyio.create_task_group() as group:
            for pid in ("b", "c"):
                group.start_soon(call, pid)
            while state.active < 2:  # noqa: ASYNC110 (the fake server offers no event)
                await anyio.sleep(0.01)
            full = await http.post(url + EV + "/programs/d/start", json={"session_id": "s"})
            state.gate.set()
        metrics = (await http.get(url + "/metrics")).text
    assert live == ["b", "c"]
    assert full.status_code == 503
    assert full.json()["error"]["code"] == "process_table_full"
    assert "retry-after" in full.headers
    assert "agentrt_controller_program_evictions_total 1" in metrics
    assert [a.status_code for a in answers] == [200, 200]


async def test_predicted_wait_durations_are_clamped() -> None:
    async with (
        fake_backends(FakeState()) as urls,
        controller(urls, max_predicted_wait_s=30.0) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        assert (
            await http.post(url + EV + "/programs/p/start", json={"session_id": "s"})
        ).is_success
        wait = {"session_id": "s", "thread_id": "main", "node_id": "t1", "tool_name": "sleep",
                "predicted_duration_s": 1e9}  # fmt: skip
        assert (await http.post(url + EV + "/programs/p/tool-start", json=wait)).is_success
        listing = (await http.get(url + EV + "/programs")).json()
    (entry,) = listing["entries"]
    assert entry["tool_waits"][0]["predicted_duration_s"] == 30.0
    (key,) = app.core.dispatcher.table.keys()
    held = app.core.dispatcher.table.get(key)
    assert held is not None and held.held_until_s() - held.created_s < 31
    assert app.core.max_predicted_wait_s() == 30.0
    default = ControllerConfig(program_idle_timeout_s=120.0)
    assert (default.max_predicted_wait_s, default.program_idle_timeout_s) == (None, 120.0)


async def test_program_listing_pages_are_bounded_and_follow_a_cursor() -> None:
    async with (
        fake_backends(FakeState()) as urls,
        controller(urls) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        for index in range(1003):
            start = await http.post(url + EV + f"/programs/p{index}/start",
                                    json={"session_id": "s"})  # fmt: skip
            assert start.status_code == 200
        huge = (await http.get(url + EV + "/programs?limit=100000")).json()
        seen: list[str] = []
        cursor: int | None = -1
        pages = 0
        while cursor is not None:
            page = (await http.get(url + EV + f"/programs?limit=400&cursor={cursor}")).json()
            seen += [e["program_id"] for e in page["entries"]]
            cursor = page["next_cursor"]
            pages += 1
        bad = await http.get(url + EV + "/programs?limit=-1")
    assert len(huge["entries"]) == 1000 and huge["programs"] == 1003
    assert huge["next_cursor"] is not None
    assert pages == 3 and seen == [f"p{i}" for i in range(1003)]
    assert bad.status_code == 400


def test_hash_key_prints_the_stored_form_of_a_key_from_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("key-alice-0001\n"))
    assert main(["controller", "hash-key"]) == 0
    assert capsys.readouterr().out.strip() == H_ALICE
    # sha256 of the UTF-8 bytes, the form a key file stores
    assert "sha256:" + hashlib.sha256(b"key-alice-0001").hexdigest() == H_ALICE
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    assert main(["controller", "hash-key"]) == 2


async def test_open_mode_with_an_admin_token_shows_backends_to_the_admin_only() -> None:
    async with (
        fake_backends(FakeState()) as urls,
        controller(urls, admin_token="admin-token-9") as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        anyone = (await http.get(url + EV + "/queues")).json()
        admin = (
            await http.get(url + EV + "/queues", headers={"authorization": "Bearer admin-token-9"})
        ).json()
        call = await http.post(
            url + "/v1/chat/completions",
            json=chat_body(),
            headers={"authorization": "Bearer admin-token-9"},
        )
    assert "backends" not in anyone and anyone["queued"] == 0
    assert admin["backends"][0]["url"].startswith("http://127.0.0.1:")
    assert call.status_code == 200  # open mode: the admin is the default tenant too
