"""Every route the controller and the engine emulator answer is named in their ``serve --help``
and in their docs (routes read from the apps themselves), and an unknown path or method is
answered in each server's JSON error envelope, over real HTTP."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from agentrt.cli import build_parser
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.server import EmulatorConfig, serve_engine
from agentrt_emulator.server.app import build_app
from agentrt_emulator.server.state import build_state

pytestmark = pytest.mark.timeout(60)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def controller_routes() -> set[str]:
    app = ControllerApp(ControllerConfig(backends=(BackendSpec("http://127.0.0.1:9"),)))
    # The generation and routed paths bypass Starlette's router (app.py): both tables count.
    paths = set(app._generation) | {route.path for route in app._starlette.routes}  # type: ignore[attr-defined]
    assert "/v1/responses" in paths and "/agentrt/v1/queues" in paths
    return paths


def emulator_routes() -> set[str]:
    app = build_app(build_state(EmulatorConfig())).app
    paths = {route.path for route in app.routes}  # type: ignore[attr-defined]
    assert "/detokenize" in paths and "/agentrt/engine/v1/state" in paths
    return paths


def _pattern(template: str) -> re.Pattern[str]:
    """A route template (``/a/{x:path}/b``) as it may be written in text: each parameter any
    one segment (``{id}``, ``ID``, ``start``), the path standing on its own (``/tokenize`` is
    not named by ``/detokenize``)."""
    parts = re.split(r"\{[^}]*\}", template)
    body = r"[^\s`|/),]+".join(re.escape(part) for part in parts)
    return re.compile(r"(?<![\w/.-])" + body + r"(?![\w/{-])")


def _named(template: str, text: str, *, families: bool) -> bool:
    """Whether ``text`` names ``template``; with ``families`` a ``/prefix/...`` covers every
    route under ``/prefix`` (a --help groups the program-event API so)."""
    if _pattern(template).search(text):
        return True
    segments = template.split("/")
    return families and any(
        "/".join(segments[:i]) + "/..." in text for i in range(2, len(segments))
    )


def _help(capsys: pytest.CaptureFixture[str], command: str) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "serve", "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("command", "routes", "doc"),
    [
        ("controller", controller_routes, "controller.md"),
        ("engine", emulator_routes, "engine-emulator.md"),
    ],
)
def test_every_route_is_named_in_help_and_docs(
    capsys: pytest.CaptureFixture[str], command: str, routes: object, doc: str
) -> None:
    assert callable(routes)
    paths = sorted(routes())
    help_text = _help(capsys, command)
    doc_text = (DOCS / doc).read_text()
    assert [p for p in paths if not _named(p, help_text, families=True)] == []
    assert [p for p in paths if not _named(p, doc_text, families=False)] == []


def test_the_matcher_tells_paths_apart() -> None:
    assert not _named("/tokenize", "POST /detokenize", families=False)
    assert not _named("/v1/completions", "/v1/chat/completions", families=False)
    assert _named("/agentrt/v1/backends/{backend_id}", "DELETE /agentrt/v1/backends/ID",
                  families=False)  # fmt: skip
    assert _named("/agentrt/v1/programs/{p:path}/{event}", "/agentrt/v1/...", families=True)


def test_policy_help_lists_only_what_the_controller_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    help_text = _help(capsys, "controller")
    policy_line = next(line for line in help_text.splitlines() if "--policy" in line)
    assert "srpt" not in help_text and "fcfs" in help_text, policy_line
    with pytest.raises(Exception, match="'fcfs', 'mlfq', 'plas', 'atlas' or 'gittins', got 'srpt'"):
        ControllerConfig(backends=("http://127.0.0.1:9",), policy="srpt")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_unknown_paths_and_methods_answer_json_in_both_servers() -> None:
    async with serve_engine(EmulatorConfig()) as engine:
        spec = BackendSpec(engine.base_url, kind="emulator")
        config = ControllerConfig(port=0, backends=(spec,))
        async with serve_controller(config) as url, httpx.AsyncClient() as http:
            for base in (url, engine.base_url):
                for method, path, status in (
                    ("GET", "/no/such/path", 404),
                    ("DELETE", "/v1/models", 405),
                    ("GET", "/v1/chat/completions", 405),
                    ("GET", "/v1/embeddings", 405),
                ):
                    answer = await http.request(method, base + path)
                    assert answer.status_code == status, (base, method, path)
                    assert answer.headers["content-type"].startswith("application/json")
                    error = answer.json()["error"]
                    assert error["message"] and "type" in error and "param" in error
                    if status == 405:
                        assert "allow" in answer.headers, (base, method, path)
            event = await http.post(url + "/agentrt/v1/programs/p1/restart", json={})
            assert event.status_code == 404 and event.json()["error"]["param"] == "event"


@pytest.mark.anyio
async def test_a_bad_backend_spec_names_its_field() -> None:
    config = ControllerConfig(port=0, backends=(BackendSpec("http://127.0.0.1:9"),))
    cases = [
        ({"spec": "http://127.0.0.1:9,priority=maybe"}, "priority"),
        ({"url": "http://127.0.0.1:9", "priority": "maybe"}, "priority"),
        ({"url": "ftp://x"}, "url"),
        ({"url": "http://127.0.0.1:10", "kind": "nope"}, "kind"),
        ({"url": "http://127.0.0.1:10", "options": {"foo": 1}}, "options"),
    ]
    async with serve_controller(config) as url, httpx.AsyncClient() as http:
        for body, param in cases:
            answer = await http.post(url + "/agentrt/v1/backends", json=body)
            assert answer.status_code == 400, body
            assert answer.json()["error"]["param"] == param, answer.text
