"""Models in configuration: a backend's declared ``models``, the controller's aliases and
fallbacks — read from a file, the environment and flags, bad values refused with the key's
path and source (docs/routing.md, "Several models")."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.backends import BackendSpec, build_backend
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.service import load_config

pytestmark = pytest.mark.timeout(30)

#: Nothing listens there: a declared model list is answered without asking.
DEAD = "http://127.0.0.1:9"


@pytest.mark.anyio
async def test_declared_models_are_answered_without_asking_the_server() -> None:
    http = HttpPool.create()
    try:
        backend = build_backend(BackendSpec.parse(f"{DEAD},kind=vllm,models=org/a|org/b"), http)
        assert [m["id"] for m in await backend.models()] == ["org/a", "org/b"]
    finally:
        await http.aclose()


@pytest.mark.parametrize("value", ["org/a||org/b", "|", " "])
def test_bad_declared_models_are_config_errors(value: str) -> None:
    with pytest.raises(ConfigError, match="models must be model ids"):
        build_backend(BackendSpec.parse(f"{DEAD},kind=openai,models={value}"), HttpPool.create())


def test_aliases_and_fallbacks_from_file_environment_and_flags(tmp_path: Path) -> None:
    file = tmp_path / "controller.toml"
    file.write_text(
        '[controller]\nmodel_aliases = { small = "org/v-1b" }\n'
        'model_fallbacks = { "org/p-8b" = ["org/v-1b", "org/v-3b"] }\n'
    )
    config = load_config(file)
    assert config.model_aliases == {"small": "org/v-1b"}
    assert config.model_fallbacks == {"org/p-8b": ("org/v-1b", "org/v-3b")}
    env = {
        "AGENTRT_CONTROLLER_MODEL_ALIASES": "small=org/v-1b, big=org/p-8b",
        "AGENTRT_CONTROLLER_MODEL_FALLBACKS": "org/p-8b=org/v-1b org/v-1b=org/p-8b",
    }
    config = load_config(env=env)
    assert config.model_aliases == {"small": "org/v-1b", "big": "org/p-8b"}
    assert config.model_fallbacks == {"org/p-8b": ("org/v-1b",), "org/v-1b": ("org/p-8b",)}
    flags = {"model_aliases": ["small=org/v-1b"], "model_fallbacks": ["org/p-8b=org/v-1b,x"]}
    config = load_config(overrides=flags)
    assert config.model_fallbacks == {"org/p-8b": ("org/v-1b", "x")}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"model_aliases": ["small"]}, "model_aliases: each entry must be NAME=MODEL"),
        ({"model_aliases": ["x=x"]}, "model_aliases.x: an alias cannot name itself"),
        ({"model_aliases": ["a=b", "b=c"]}, "model_aliases.a: names 'b', itself an alias"),
        ({"model_fallbacks": ["m=m"]}, "model_fallbacks.m: a model cannot fall back to itself"),
        ({"model_fallbacks": ["m=a,a"]}, "model_fallbacks.m: names a model twice"),
        ({"model_fallbacks": ["m=a,"]}, "model_fallbacks.m: needs one or more model names"),
    ],
)
def test_bad_aliases_and_fallbacks_name_the_key_and_the_flag(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        load_config(overrides=overrides)
    flag = "--model-alias" if "model_aliases" in overrides else "--model-fallback"
    assert f"({flag})" in str(refused.value)
