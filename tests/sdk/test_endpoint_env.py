"""The SDK takes its endpoint and key from the environment as the ``openai`` client does
(docs/sdk.md, "Endpoint and key"): the argument, else ``AGENTRT_*``, else ``OPENAI_*``; over
real HTTP against a controller that requires a key."""

from __future__ import annotations

import pytest

import agentrt
from agentrt import ConfigError, LLMCallError, Runtime, RuntimeConfig
from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine

pytestmark = [pytest.mark.timeout(60)]


# (case, environment, arguments, expected base_url, expected api_key)
ORDER: list[tuple[str, dict[str, str], dict[str, str], str, str]] = [
    ("openai's variables", {"OPENAI_BASE_URL": "http://o/v1", "OPENAI_API_KEY": "ko"}, {},
     "http://o/v1", "ko"),
    ("agentrt's rank above openai's",
     {"OPENAI_BASE_URL": "http://o/v1", "OPENAI_API_KEY": "ko",
      "AGENTRT_BASE_URL": "http://a/v1", "AGENTRT_API_KEY": "ka"}, {}, "http://a/v1", "ka"),
    ("arguments win", {"AGENTRT_BASE_URL": "http://a/v1", "OPENAI_API_KEY": "ko"},
     {"base_url": "http://c/v1", "api_key": "kc"}, "http://c/v1", "kc"),
    ("url and key looked up apart", {"OPENAI_API_KEY": "ko"}, {"base_url": "http://c/v1"},
     "http://c/v1", "ko"),
    ("no key anywhere", {"AGENTRT_BASE_URL": "http://a/v1"}, {}, "http://a/v1", "EMPTY"),
    ("an empty variable is not set", {"AGENTRT_BASE_URL": " ", "OPENAI_BASE_URL": "http://o/v1"},
     {}, "http://o/v1", "EMPTY"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "environ", "arguments", "url", "key"), ORDER)
def test_the_endpoint_and_key_come_from_the_first_place_that_sets_them(
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    environ: dict[str, str],
    arguments: dict[str, str],
    url: str,
    key: str,
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    config = RuntimeConfig(**arguments)  # type: ignore[arg-type]
    assert (config.base_url, config.api_key) == (url, key), case
    assert key not in repr(config) or key == "EMPTY"  # the key never printed


def test_no_url_anywhere_names_the_places_to_set_one() -> None:
    with pytest.raises(ConfigError, match="AGENTRT_BASE_URL or OPENAI_BASE_URL"):
        RuntimeConfig()


def test_a_bad_url_in_the_environment_is_refused_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:8000")
    with pytest.raises(ConfigError, match="base_url must be an http"):
        RuntimeConfig()


@pytest.mark.anyio
async def test_a_keyed_controller_is_reached_with_openais_variables_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serve_engine(EmulatorConfig(time_scale=500.0)) as engine:
        config = ControllerConfig(
            port=0, backends=(BackendSpec(engine.base_url),), api_keys="alice=key-alice-0001"
        )
        async with serve_controller(config) as url:
            monkeypatch.setenv("OPENAI_BASE_URL", url + "/v1")
            # Without the key: the controller refuses the call (401), as before.
            async with Runtime(RuntimeConfig(model=DEFAULT_MODEL_NAME)) as rt:
                with pytest.raises(LLMCallError):
                    await agentrt.chat([{"role": "user", "content": "hi"}], max_tokens=2)
            monkeypatch.setenv("OPENAI_API_KEY", "key-alice-0001")
            async with Runtime(RuntimeConfig()) as rt, rt.program("keyed") as prog:
                reply = await agentrt.chat([{"role": "user", "content": "hi"}], max_tokens=2)
            assert rt.controller_state == "connected"
    assert reply.choices[0].message.content is not None
    assert prog.status == "ok"
