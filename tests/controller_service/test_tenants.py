"""Tenants over real HTTP: API keys, isolation between tenants, per-tenant cache salts.

A controller on loopback in front of fake OpenAI servers (and, for the prefix cache, a real
engine emulator): a missing or wrong key is 401; tenant B can neither see, charge, end nor
tool-wait tenant A's programs even with A's ids (404, A's attained service unchanged); the
backends never see a tenant's key; identical prompts of two tenants share no cached tokens,
those of one tenant (or of one cache group) do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

import agentrt
from agentrt import Runtime, RuntimeConfig
from agentrt.errors import EndpointUnavailable
from agentrt.protocol import EVENTS_PREFIX, CallTags
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_controller.service.core.tenants import hash_key
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.controller_service.conftest import chat_body, controller, fake_backends
from tests.controller_service.fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

KEYS = "alice=key-alice-0001,bob=key-bob-0002"
ALICE = {"authorization": "Bearer key-alice-0001"}
BOB = {"authorization": "Bearer key-bob-0002"}
EV = EVENTS_PREFIX


def _tags(program_id: str, session_id: str = "s1", node: str = "n1") -> dict[str, str]:
    return CallTags(
        program_id=program_id, session_id=session_id, thread_id="main", node_id=node
    ).to_headers()


async def _program(http: httpx.AsyncClient, url: str, auth: dict[str, str], pid: str) -> Any:
    """The caller's entry for ``pid`` in ``GET /programs`` (``None`` = not listed)."""
    listing = (await http.get(url + EV + "/programs", headers=auth)).json()
    return next((e for e in listing["entries"] if e["program_id"] == pid), None)


async def test_a_missing_or_wrong_key_is_401_and_health_stays_open() -> None:
    async with (
        fake_backends(FakeState()) as urls,
        controller(urls, api_keys=KEYS) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        missing = await http.post(url + "/v1/chat/completions", json=chat_body())
        wrong = await http.post(
            url + "/v1/chat/completions", json=chat_body(), headers={"authorization": "Bearer x"}
        )
        basic = await http.get(url + "/v1/models", headers={"authorization": "Basic a2V5"})
        events = await http.get(url + EV + "/programs")
        right = await http.post(url + "/v1/chat/completions", json=chat_body(), headers=ALICE)
        health = await http.get(url + "/health")
        metrics = (await http.get(url + "/metrics")).text
    for refused in (missing, wrong, basic, events):
        assert refused.status_code == 401, refused.text
        assert refused.headers["www-authenticate"] == "Bearer"
        error = refused.json()["error"]
        assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
    assert "missing API key" in missing.json()["error"]["message"]
    assert right.status_code == 200 and health.status_code == 200
    assert 'agentrt_controller_tenant_refusals_total{status="401",tenant=""} 4' in metrics
    assert 'agentrt_controller_tenant_calls_total{tenant="alice"} 1' in metrics


async def test_backends_get_the_controllers_credential_never_the_tenants_key() -> None:
    state, other = FakeState(), FakeState()
    async with fake_backends(state, other) as (first, second):
        backends = (
            BackendSpec(first, options={"api_key": "backend-secret-1"}),
            BackendSpec(second),
        )
        config = ControllerConfig(port=0, backends=backends, api_keys=KEYS)
        async with serve_controller(config) as url, httpx.AsyncClient(timeout=20) as http:
            for _ in range(4):  # round robin / prefix: both backends get calls
                body = chat_body(messages=[{"role": "user", "content": f"q{_}" * 50}])
                answer = await http.post(url + "/v1/chat/completions", json=body, headers=ALICE)
                assert answer.status_code == 200
    seen = [h.get("authorization") for h in state.headers + other.headers]
    assert "Bearer key-alice-0001" not in seen
    assert {h.get("authorization") for h in state.headers} <= {"Bearer backend-secret-1"}
    assert {h.get("authorization") for h in other.headers} <= {None}
    assert len(seen) == 4


async def test_client_authorization_passes_through_only_when_configured() -> None:
    state = FakeState()
    async with (
        fake_backends(state) as urls,
        controller(urls, api_key="single-key-123", forward_client_authorization=True) as (url, _),
        httpx.AsyncClient(timeout=20) as http,
    ):
        auth = {"authorization": "Bearer single-key-123"}
        assert (await http.post(url + "/v1/chat/completions", json=chat_body())).status_code == 401
        answer = await http.post(url + "/v1/chat/completions", json=chat_body(), headers=auth)
    assert answer.status_code == 200
    assert state.headers[-1]["authorization"] == "Bearer single-key-123"


async def test_tenant_b_cannot_see_charge_end_or_tool_wait_tenant_as_program() -> None:
    state = FakeState(tokens=20)
    async with (
        fake_backends(state) as urls,
        controller(urls, api_keys=KEYS) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        start = {"session_id": "s1", "name": "react"}
        assert (
            await http.post(url + EV + "/programs/p1/start", json=start, headers=ALICE)
        ).is_success
        answer = await http.post(
            url + "/v1/chat/completions", json=chat_body(), headers={**ALICE, **_tags("p1")}
        )
        assert answer.status_code == 200
        before = await _program(http, url, ALICE, "p1")
        assert before is not None and before["tenant"] == "alice"
        attained = before["attained_service_s"]
        assert attained > 0

        # B knows A's ids: it lists, calls with A's tags, ends, waits and deletes the session.
        assert await _program(http, url, BOB, "p1") is None
        for node in ("b1", "b2", "b3"):
            charged = await http.post(
                url + "/v1/chat/completions", json=chat_body(),
                headers={**BOB, **_tags("p1", node=node)},
            )  # fmt: skip
            assert charged.status_code == 200
        wait = {"session_id": "s1", "thread_id": "main", "node_id": "t1", "tool_name": "human",
                "kind": "human", "predicted_duration_s": 5.0}  # fmt: skip
        done = {**{k: v for k, v in wait.items() if k not in ("kind", "predicted_duration_s")},
                "duration_s": 1.0}  # fmt: skip
        refused = [
            await http.post(
                url + EV + "/programs/ghost/end", json={"session_id": "s1"}, headers=BOB
            ),
            await http.post(url + EV + "/programs/ghost/tool-start", json=wait, headers=BOB),
        ]
        # B's own calls made B a program "p1" of its own; end it, then A's stays unreachable.
        own_end = await http.post(url + EV + "/programs/p1/end", json={"session_id": "s1"},
                                  headers=BOB)  # fmt: skip
        assert own_end.status_code == 200
        refused += [
            await http.post(url + EV + "/programs/p1/end", json={"session_id": "s1"}, headers=BOB),
            await http.post(url + EV + "/programs/p1/tool-start", json=wait, headers=BOB),
            await http.post(url + EV + "/programs/p1/tool-end", json=done, headers=BOB),
        ]
        deleted = await http.delete(url + EV + "/sessions/s1", headers=BOB)
        after = await _program(http, url, ALICE, "p1")
        metrics = (await http.get(url + "/metrics")).text
        # A's own tool wait works.
        mine = await http.post(url + EV + "/programs/p1/tool-start", json=wait, headers=ALICE)
    for answer in refused:
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "program_not_found"
    assert refused[0].json()["error"]["message"] == refused[2].json()["error"]["message"].replace(
        "p1", "ghost"
    )  # a missing program and another tenant's read the same
    assert deleted.json()["programs_ended"] == 0
    assert after is not None
    assert after["attained_service_s"] == attained and after["calls_finished"] == 1
    assert after["tool_waits"] == []
    assert mine.status_code == 200
    assert 'agentrt_controller_tenant_refusals_total{status="404",tenant="bob"} 5' in metrics
    assert app.core.dispatcher.table.programs_of("alice") == 1


async def test_each_tenant_lists_its_own_programs_and_the_admin_all() -> None:
    async with (
        fake_backends(FakeState()) as urls,
        controller(urls, api_keys=KEYS, admin_token="admin-token-9") as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        for auth, pid in ((ALICE, "a1"), (ALICE, "a2"), (BOB, "b1")):
            start = await http.post(url + EV + f"/programs/{pid}/start",
                                    json={"session_id": "s"}, headers=auth)  # fmt: skip
            assert start.status_code == 200
        admin = {"authorization": "Bearer admin-token-9"}
        alice = (await http.get(url + EV + "/programs", headers=ALICE)).json()
        everyone = (await http.get(url + EV + "/programs", headers=admin)).json()
        queues_bob = (await http.get(url + EV + "/queues", headers=BOB)).json()
        queues_admin = (await http.get(url + EV + "/queues", headers=admin)).json()
        admin_call = await http.post(url + "/v1/chat/completions", json=chat_body(), headers=admin)
    assert [e["program_id"] for e in alice["entries"]] == ["a1", "a2"]
    assert alice["programs"] == 2 and "sessions" not in alice
    assert sorted(e["program_id"] for e in everyone["entries"]) == ["a1", "a2", "b1"]
    assert "backends" not in queues_bob and "retention" not in queues_bob
    assert all("calls" not in q for q in queues_bob["queues"])
    assert queues_admin["backends"][0]["url"].startswith("http://127.0.0.1:")
    assert admin_call.status_code == 401  # the admin token is no tenant's key


async def test_cache_salt_is_per_tenant_and_replaces_a_clients_own() -> None:
    state = FakeState()
    async with (
        fake_backends(state) as urls,
        controller(urls, api_keys=KEYS) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        for auth in (ALICE, ALICE, BOB):
            answer = await http.post(url + "/v1/chat/completions", json=chat_body(), headers=auth)
            assert answer.status_code == 200
        chosen = chat_body(cache_salt="pick-alices-salt")
        assert (await http.post(url + "/v1/chat/completions", json=chosen, headers=BOB)).is_success
    salts = [r["cache_salt"] for r in state.requests]
    assert salts[0] == salts[1] != salts[2] == salts[3]
    assert "alice" not in salts[0] and "pick" not in salts[3]


def _long_prompt() -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are a careful agent. " * 30},
        {"role": "user", "content": "Summarise the report on the north field. " * 10},
    ]


async def _cached(http: httpx.AsyncClient, url: str, auth: dict[str, str]) -> int:
    body = {"model": DEFAULT_MODEL_NAME, "messages": _long_prompt(), "max_tokens": 4}
    answer = await http.post(url + "/v1/chat/completions", json=body, headers=auth)
    assert answer.status_code == 200, answer.text
    usage = answer.json()["usage"]
    assert usage["prompt_tokens"] > 100
    return int(usage["prompt_tokens_details"]["cached_tokens"])


async def test_identical_prompts_share_cached_tokens_within_a_tenant_or_group_only(
    tmp_path: Path,
) -> None:
    key_file = tmp_path / "keys.toml"
    key_file.write_text(
        f"""
[tenants.alice]
keys = ["{hash_key("key-alice-0001")}"]
cache_group = "docs"

[tenants.bob]
keys = ["{hash_key("key-bob-0002")}"]

[tenants.carol]
keys = ["{hash_key("key-carol-0003")}"]
cache_group = "docs"
""",
        encoding="utf-8",
    )
    carol = {"authorization": "Bearer key-carol-0003"}
    async with serve_engine(EmulatorConfig()) as engine:
        config = ControllerConfig(
            port=0,
            backends=(BackendSpec(engine.base_url, kind="emulator"),),
            api_key_file=str(key_file),
            retention="off",
        )
        async with serve_controller(config) as url, httpx.AsyncClient(timeout=30) as http:
            first_bob = await _cached(http, url, BOB)
            again_bob = await _cached(http, url, BOB)
            first_alice = await _cached(http, url, ALICE)
            carol_after_alice = await _cached(http, url, carol)
    assert first_bob == 0
    assert again_bob > 0  # within one tenant the prefix cache works
    assert first_alice == 0  # bob's identical prompt leaks nothing to alice
    assert carol_after_alice > 0  # one cache group shares


async def test_open_mode_has_one_default_tenant_and_forwards_the_body_unchanged() -> None:
    state = FakeState()
    async with (
        fake_backends(state) as urls,
        controller(urls) as (url, app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        body = chat_body(cache_salt="client-salt")
        answer = await http.post(
            url + "/v1/chat/completions", json=body, headers={"authorization": "Bearer anything",
                                                              **_tags("p")}
        )  # fmt: skip
        listing = (await http.get(url + EV + "/programs")).json()
    assert answer.status_code == 200
    assert state.requests[0]["cache_salt"] == "client-salt"
    assert "authorization" not in state.headers[0]  # a key never goes on by default
    assert listing["entries"][0]["tenant"] == "default"
    assert app.core.tenants.open


async def test_a_tenant_may_choose_a_salt_inside_its_own_namespace(tmp_path: Path) -> None:
    key_file = tmp_path / "keys.toml"
    key_file.write_text(
        f'[tenants.alice]\nkeys = ["{hash_key("key-alice-0001")}"]\nchoose_cache_salt = true\n'
        f'[tenants.bob]\nkeys = ["{hash_key("key-bob-0002")}"]\nchoose_cache_salt = true\n',
        encoding="utf-8",
    )
    state = FakeState()
    async with (
        fake_backends(state) as urls,
        controller(urls, api_key_file=str(key_file)) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        for auth, salt in ((ALICE, "x"), (ALICE, "y"), (BOB, "x"), (ALICE, None)):
            body = chat_body() if salt is None else chat_body(cache_salt=salt)
            assert (
                await http.post(url + "/v1/chat/completions", json=body, headers=auth)
            ).is_success
    salts = [r["cache_salt"] for r in state.requests]
    assert len(set(salts)) == 4  # alice x, alice y, bob x (not alice's x), alice's default


async def test_an_sdk_program_runs_under_its_tenants_key() -> None:
    seen: list[Any] = []
    async with serve_engine(EmulatorConfig()) as engine:
        config = ControllerConfig(
            port=0, backends=(BackendSpec(engine.base_url, kind="emulator"),), api_keys=KEYS
        )
        async with serve_controller(config, on_app=seen.append) as url:
            runtime = RuntimeConfig(
                base_url=url + "/v1", model=DEFAULT_MODEL_NAME, controller="required",
                api_key="key-alice-0001",
            )  # fmt: skip
            async with Runtime(runtime) as rt, rt.program("react") as program:
                for step in range(3):
                    await agentrt.chat([{"role": "user", "content": f"step {step}"}], max_tokens=4)
                table = seen[0].core.dispatcher.table
                (key,) = table.keys()
                entry = table.get(key)
            wrong = RuntimeConfig(
                base_url=url + "/v1", model=DEFAULT_MODEL_NAME, controller="required",
                api_key="not-a-key",
            )  # fmt: skip
            with pytest.raises(EndpointUnavailable, match="401"):
                async with Runtime(wrong):
                    pass
    assert key.tenant == "alice" and key.program_id == program.id
    assert entry is not None and entry.calls_finished == 3
    assert seen[0].metrics.tenant_calls.value("alice") == 3
