"""Backend specs, kind options and the controller's breaker / admin settings: bad values are
ConfigErrors at start-up, never silently ignored."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.backends import BackendSpec, build_backend
from agentrt_controller.backends.breaker import BreakerConfig
from agentrt_controller.backends.emulator import EmulatorBackend
from agentrt_controller.backends.sglang import SGLangBackend
from agentrt_controller.backends.transport import HttpPool
from agentrt_controller.service import ControllerConfig, load_config

URL = "http://127.0.0.1:8000"


def test_priority_auto_parses_in_both_spec_forms() -> None:
    assert BackendSpec.parse(f"{URL},priority=auto").priority == "auto"
    assert BackendSpec.from_mapping({"url": URL, "priority": "auto"}).priority == "auto"
    assert BackendSpec.parse(f"{URL},priority=on").priority is True
    with pytest.raises(ConfigError):
        BackendSpec.parse(f"{URL},priority=maybe")


@pytest.mark.parametrize(
    "text",
    [
        f"{URL},kind=openai,priority=auto",
        f"{URL},kind=sglang,priority=auto",
        f"{URL},kind=sglang,priority_order=sideways",
        f"{URL},kind=sglang,priority_top=-1",
        f"{URL},kind=sglang,pins=perhaps",
        f"{URL},kind=sglang,default_pin_ttl_s=0",
        f"{URL},kind=vllm,token_cache_entries=many",
        f"{URL},kind=vllm,pins=on",
        f"{URL},kind=emulator,probe_timeout_s=0",
        f"{URL},kind=openai,aux_timeout_s=x",
        f"{URL},kind=tgi",
    ],
)
def test_bad_kind_options_are_config_errors(text: str) -> None:
    http = HttpPool.create()
    with pytest.raises(ConfigError):
        build_backend(BackendSpec.parse(text), http)


def test_kind_options_reach_the_backend() -> None:
    http = HttpPool.create()
    sglang = build_backend(
        BackendSpec.parse(f"{URL},kind=sglang,priority=on,priority_top=7,pins=on"), http
    )
    emulator = build_backend(BackendSpec.parse(f"{URL},kind=emulator,priority=auto"), http)
    assert isinstance(sglang, SGLangBackend) and sglang.priority_top == 7
    assert sglang.capabilities.supports_pins and sglang.capabilities.supports_priority
    assert isinstance(emulator, EmulatorBackend) and emulator.priority_mode == "auto"
    assert emulator.capabilities.supports_pins and not emulator.capabilities.supports_priority


def test_breaker_and_admin_token_from_the_environment() -> None:
    config = load_config(
        env={
            "AGENTRT_CONTROLLER_BACKENDS": f"{URL},priority=auto",
            "AGENTRT_CONTROLLER_BREAKER": '{"failure_threshold": 3, "cooldown_s": 2.5}',
            "AGENTRT_CONTROLLER_ADMIN_TOKEN": "long-enough-token",
        }
    )
    assert config.breaker == BreakerConfig(failure_threshold=3, cooldown_s=2.5)
    assert config.admin_token == "long-enough-token"
    assert config.backends[0].priority == "auto"
    assert load_config(env={"AGENTRT_CONTROLLER_ADMIN_TOKEN": ""}).admin_token is None


@pytest.mark.parametrize(
    "options",
    [
        {"breaker": {"failure_treshold": 3}},
        {"breaker": {"error_rate": 2}},
        {"admin_token": "short"},
    ],
)
def test_bad_breaker_or_token_is_a_config_error(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ControllerConfig(**options)


def test_breaker_json_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ConfigError):
        load_config(env={"AGENTRT_CONTROLLER_BREAKER": "[1, 2]"})
