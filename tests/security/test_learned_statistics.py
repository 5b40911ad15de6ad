"""One tenant's traffic cannot change another's retention, over real HTTP (docs/security.md,
"Shared learned statistics").

The probe, scaled down: a controller with two API keys in front of a fake OpenAI server;
tenant B runs programs under A's program name and tool name whose waits never return (the
program ends during the wait). Then A's wait is still retained, and B's own next wait is not
(the policy did learn — for B). With B opted in to sharing (``share_statistics = true``) and
A without samples of its own, B's programs inform A's prior: A's wait is not retained either.
The decisions are read from ``GET /agentrt/v1/queues`` (the admin's view).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from agentrt.protocol import EVENTS_PREFIX, CallTags
from agentrt_controller.service.core.tenants import hash_key
from tests.controller_service.conftest import chat_body, controller, fake_backends
from tests.controller_service.fake_openai import FakeState

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ALICE = {"authorization": "Bearer key-alice-0001"}
BOB = {"authorization": "Bearer key-bob-0002"}
ADMIN = {"authorization": "Bearer admin-token-9"}
#: B's programs whose waits never return: 4 / (5 + n) < 0.2 from n = 16 (the Beta prior).
B_PROGRAMS = 20
MESSAGES = [{"role": "user", "content": "Look up the weather in the north field. " * 8}]


def _key_file(path: Path, *, bob_shares: bool) -> str:
    path.write_text(
        f"""
[tenants.alice]
keys = ["{hash_key("key-alice-0001")}"]

[tenants.bob]
keys = ["{hash_key("key-bob-0002")}"]
share_statistics = {"true" if bob_shares else "false"}
""",
        encoding="utf-8",
    )
    return str(path)


async def _wait_in_program(
    http: httpx.AsyncClient, url: str, auth: dict[str, str], program_id: str, *, end: bool
) -> None:
    """Program ``react`` with one call, then a ``search`` wait; ``end``: the program ends
    during the wait (it never returns)."""
    events = url + EVENTS_PREFIX + f"/programs/{program_id}"
    start = await http.post(events + "/start", json={"session_id": "s", "name": "react"},
                            headers=auth)  # fmt: skip
    assert start.status_code == 200, start.text
    tags = CallTags(session_id="s", program_id=program_id, thread_id="main", node_id="c0")
    answer = await http.post(
        url + "/v1/chat/completions",
        json=chat_body(messages=MESSAGES),
        headers={**auth, **tags.to_headers()},
    )
    assert answer.status_code == 200, answer.text
    wait = {"session_id": "s", "thread_id": "main", "node_id": "t1", "tool_name": "search",
            "predicted_duration_s": 2.0}  # fmt: skip
    assert (await http.post(events + "/tool-start", json=wait, headers=auth)).status_code == 200
    if end:
        ended = await http.post(events + "/end", json={"session_id": "s"}, headers=auth)
        assert ended.status_code == 200


async def _decisions(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    queues = (await http.get(url + EVENTS_PREFIX + "/queues", headers=ADMIN)).json()
    decisions: dict[str, Any] = queues["retention"]["policy"]["decisions_by_tenant"]
    return decisions


@pytest.mark.parametrize(
    ("bob_shares", "alices_reason"),
    [
        (False, "retain"),  # the default: B's traffic is B's alone
        (True, "unlikely_return"),  # B opted in: its programs are A's prior
    ],
)
async def test_tenant_bs_never_returning_waits_leave_as_retention_alone(
    tmp_path: Path, bob_shares: bool, alices_reason: str
) -> None:
    async with (
        fake_backends(FakeState()) as urls,
        controller(
            urls,
            api_key_file=_key_file(tmp_path / "keys.toml", bob_shares=bob_shares),
            admin_token="admin-token-9",
            retention="on",
        ) as (url, _app),
        httpx.AsyncClient(timeout=20) as http,
    ):
        for i in range(B_PROGRAMS):
            await _wait_in_program(http, url, BOB, f"probe-{i}", end=True)
        after_b = await _decisions(http, url)
        await _wait_in_program(http, url, ALICE, "agent-1", end=False)
        await _wait_in_program(http, url, BOB, "probe-next", end=False)
        after_a = await _decisions(http, url)
        queues = (await http.get(url + EVENTS_PREFIX + "/queues", headers=ADMIN)).json()
    # B's first 16 waits were retained, then B's own history said its programs never return.
    assert after_b == {"bob": {"retain": 16, "unlikely_return": B_PROGRAMS - 16}}
    assert after_a["alice"] == {alices_reason: 1}
    assert after_a["bob"]["unlikely_return"] == B_PROGRAMS - 16 + 1
    learned = queues["retention"]["policy"]["learned"]
    assert learned["sharing_tenants"] == (["bob"] if bob_shares else [])
    assert learned["returns"]["shared_names"] == (1 if bob_shares else 0)
    # A retained wait holds a window: the retained count says so.
    assert queues["retention"]["retained"] == (1 if alices_reason == "retain" else 0)
