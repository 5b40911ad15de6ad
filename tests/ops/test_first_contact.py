"""First contact: what a new user meets when something is not yet right — over real HTTP.

* the model is discovered from ``GET /v1/models`` when none is named (one served: used;
  several: the first, with a warning naming the others);
* an unknown model is a 404 whose message lists the served models, from the emulator, the
  controller and the SDK;
* errors name the URL and suggest the fix: nothing listening, a base URL without ``/v1``,
  ``https://`` to a plain HTTP server;
* ``agentrt ... --json`` into a pipe closed early exits quietly (no traceback).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

import agentrt
from agentrt import EndpointUnavailable, LLMCallError, Runtime, RuntimeConfig
from agentrt.cli.output import EXIT_CLOSED_PIPE
from agentrt.journal.urls import make_store
from agentrt.protocol import EVENTS_PREFIX
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.ops.processes import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

HI = [{"role": "user", "content": "hi"}]


@contextlib.asynccontextmanager
async def two_models() -> AsyncIterator[str]:
    """A controller in front of two emulators serving model-a and model-b; its base URL."""
    async with (
        serve_engine(EmulatorConfig(model_name="model-a")) as first,
        serve_engine(EmulatorConfig(model_name="model-b")) as second,
    ):
        backends = tuple(BackendSpec(e.base_url, kind="emulator") for e in (first, second))
        config = ControllerConfig(port=0, backends=backends, scrape_interval_s=0.2)
        async with serve_controller(config) as url:
            yield url


def config(base_url: str, **options: object) -> RuntimeConfig:
    return RuntimeConfig(
        base_url=base_url, max_retries=0, retry_budget_s=0, controller="off", **options
    )  # type: ignore[arg-type]


async def test_the_served_model_is_used_when_none_is_named() -> None:
    async with serve_engine(EmulatorConfig(time_scale=400)) as engine:
        assert await agentrt.discover_model(engine.openai_base_url) == DEFAULT_MODEL_NAME
        async with Runtime(config(engine.openai_base_url)) as rt:
            first = await agentrt.chat(HI, max_tokens=4)
            await agentrt.chat(HI, max_tokens=4)
            assert first.model == DEFAULT_MODEL_NAME
            assert rt.served_model.known == DEFAULT_MODEL_NAME


async def test_several_models_the_first_is_used_and_the_others_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with two_models() as url:
        with caplog.at_level(logging.WARNING, logger="agentrt.models"):
            model = await agentrt.discover_model(url + "/v1")
    assert model in ("model-a", "model-b")
    other = "model-b" if model == "model-a" else "model-a"
    assert f"using the first, {model} (others: {other})" in caplog.text


async def test_an_unknown_model_lists_the_served_ones_in_the_emulator() -> None:
    async with serve_engine(EmulatorConfig(time_scale=400)) as engine:
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                engine.openai_base_url + "/chat/completions",
                json={"model": "M", "messages": HI, "max_tokens": 4},
            )
        assert answer.status_code == 404
        assert f"serves `{DEFAULT_MODEL_NAME}`" in answer.json()["error"]["message"]
        async with Runtime(config(engine.openai_base_url, model="M")) as rt:
            with pytest.raises(LLMCallError) as caught:
                await agentrt.chat(HI, max_tokens=4, runtime=rt)
    assert caught.value.status_code == 404
    message = str(caught.value)
    assert engine.openai_base_url + "/chat/completions" in message
    assert f"The model `M` does not exist; this server serves `{DEFAULT_MODEL_NAME}`" in message


async def test_an_unknown_model_lists_the_served_ones_in_the_controller() -> None:
    async with two_models() as url, httpx.AsyncClient() as http:
        with anyio.fail_after(10):  # the controller learns its backends' models by asking
            while len((await http.get(url + "/v1/models")).json()["data"]) < 2:  # noqa: ASYNC110 - over HTTP, no event to await
                await anyio.sleep(0.05)
        answer = await http.post(
            url + "/v1/chat/completions",
            json={"model": "M", "messages": HI, "max_tokens": 4},
        )
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == (
        "the model 'M' does not exist; served models: 'model-a', 'model-b'"
    )


async def test_nothing_listening_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EndpointUnavailable, match=rf"cannot connect to {url}: is the server"):
        await agentrt.discover_model(url)
    async with Runtime(config(url, model="m")) as rt:
        with pytest.raises(EndpointUnavailable) as caught:
            await agentrt.chat(HI, runtime=rt)
    assert f"cannot connect to {url}: is the server running?" in str(caught.value)
    required = RuntimeConfig(base_url=url, controller="required", event_timeout_s=5)
    with pytest.raises(EndpointUnavailable) as probe:
        async with Runtime(required):
            pass
    events = url.removesuffix("/v1") + EVENTS_PREFIX
    assert f"controller required but cannot connect to {events}: is the server" in str(probe.value)


async def test_a_base_url_without_v1_suggests_it() -> None:
    async with serve_engine(EmulatorConfig(time_scale=400)) as engine:
        root = engine.base_url
        with pytest.raises(LLMCallError, match=rf"did you mean {root}/v1\?"):
            await agentrt.discover_model(root)
        async with Runtime(config(root, model=DEFAULT_MODEL_NAME)) as rt:
            with pytest.raises(LLMCallError) as caught:
                await agentrt.chat(HI, max_tokens=4, runtime=rt)
    assert caught.value.status_code == 404
    assert f"did you mean {root}/v1?" in str(caught.value)


async def test_https_to_a_plain_http_server_says_so() -> None:
    async with serve_engine(EmulatorConfig(time_scale=400)) as engine:
        plain = engine.openai_base_url
        tls = "https://" + plain.removeprefix("http://")
        with pytest.raises(EndpointUnavailable) as caught:
            await agentrt.discover_model(tls)
        async with Runtime(config(tls, model=DEFAULT_MODEL_NAME)) as rt:
            with pytest.raises(EndpointUnavailable) as in_chat:
                await agentrt.chat(HI, max_tokens=4, runtime=rt)
    for error in (caught.value, in_chat.value):
        assert f"cannot connect to {tls}: the TLS handshake failed" in str(error)
        assert f"then use {plain}" in str(error)


async def create_journal(path: Path) -> None:
    store = make_store(str(path))
    await store.open()
    await store.close()


AGENTRT = [sys.executable, "-c", "import sys; from agentrt.cli import main; sys.exit(main())"]


@pytest.mark.parametrize(
    "arguments",
    [
        ["journal", "list", "--json", "--url", "{journal}"],
        ["journal", "list", "--url", "{journal}"],
        ["controller", "hash-key"],
        ["--help"],
        ["bench", "--help"],
    ],
)
def test_output_into_a_closed_pipe_ends_quietly(arguments: list[str], tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    anyio.run(create_journal, journal)
    command = AGENTRT + [a.replace("{journal}", str(journal)) for a in arguments]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    with subprocess.Popen(command, **pipes) as child:  # type: ignore[call-overload]
        assert child.stdin and child.stdout and child.stderr
        child.stdout.close()  # the reader is gone before the command prints (`| head -0`)
        child.stdin.write(b"a-tenant-key\n")
        child.stdin.close()
        errors = child.stderr.read().decode()
        status = child.wait(timeout=30)
    assert status in (0, EXIT_CLOSED_PIPE), errors
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors


async def test_the_langchain_adapter_names_the_url_too() -> None:
    pytest.importorskip("langchain_openai")
    from agentrt_adapters.langchain import chat_model

    url = f"http://127.0.0.1:{free_port()}/v1"
    async with Runtime(config(url, model="m")) as rt, rt.program("p"):
        with pytest.raises(EndpointUnavailable) as caught:
            await chat_model(rt, max_retries=0).ainvoke("hi")
    assert f"cannot connect to {url}/chat/completions: is the server running?" in str(caught.value)


async def test_the_model_is_asked_once_and_a_failure_is_not_kept() -> None:
    asked: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            asked.append(request.url.path)
            if len(asked) == 1:
                return httpx.Response(503, json={"error": {"message": "warming up"}})
            return httpx.Response(200, json={"object": "list", "data": [{"id": "only"}]})
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "only",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "ok"},
                }
            ],
        }
        return httpx.Response(200, json=body)

    transport = httpx.MockTransport(server)
    async with Runtime(config("http://model.test/v1", http_transport=transport)) as rt:
        with pytest.raises(LLMCallError, match=r"http://model.test/v1/models answered HTTP 503"):
            await agentrt.chat(HI, runtime=rt)
        for _ in range(3):
            assert (await agentrt.chat(HI, runtime=rt)).model == "only"
    assert len(asked) == 2
