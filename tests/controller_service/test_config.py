"""Configuration: file < environment < flags; unknown keys and bad values are errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrt.cli import main
from agentrt.errors import ConfigError
from agentrt_controller.cost_model import CostModel
from agentrt_controller.retention import RetentionConfig
from agentrt_controller.scheduling.config import SchedulerConfig
from agentrt_controller.service import ControllerApp, load_config
from agentrt_controller.service.config import ControllerConfig

pytestmark = pytest.mark.timeout(30)


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    file = tmp_path / "controller.toml"
    file.write_text(
        'policy = "plas"\nport = 9000\nadmission_window = "adaptive"\n'
        '[[backends]]\nurl = "http://a:1"\npriority = true\n'
        "[scheduling]\nstarvation_beta = 3.0\n"
    )
    env = {"AGENTRT_CONTROLLER_PORT": "9100", "AGENTRT_CONTROLLER_POLICY": "atlas"}
    config = load_config(file, env, {"port": 9200, "policy": None})
    assert config.port == 9200  # flag beats environment
    assert config.policy == "atlas"  # environment beats file (flag unset)
    assert config.admission_window == "adaptive"
    assert config.backends[0].priority and config.backends[0].url == "http://a:1"
    assert config.scheduling == SchedulerConfig(starvation_beta=3.0)


def test_json_file_and_environment_lists(tmp_path: Path) -> None:
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"controller": {"admission_window": "unlimited"}}))
    env = {
        "AGENTRT_CONTROLLER_CONFIG": str(file),
        "AGENTRT_CONTROLLER_BACKENDS": "http://a:1,priority=on  http://b:2,kind=openai",
        "AGENTRT_CONTROLLER_COST": '{"decode_s_per_token": 0.02}',
        "OTHER_VARIABLE": "ignored",
    }
    config = load_config(None, env)
    assert config.admission_window is None
    assert [b.backend_id for b in config.backends] == ["a:1", "b:2"]
    assert config.backends[1].kind == "openai"
    assert config.cost == CostModel(decode_s_per_token=0.02)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AGENTRT_CONTROLLER_PORT": "eighty"}, "controller.port: must be an integer"),
        ({"AGENTRT_CONTROLLER_PORT": "70000"}, "port"),
        ({"AGENTRT_CONTROLLER_ADMISSION_WINDOW": "0"}, "admission_window"),
        ({"AGENTRT_CONTROLLER_ADMISSION_WINDOW": "lots"}, "admission_window"),
        ({"AGENTRT_CONTROLLER_SCHEDULING": "[1]"}, "scheduling"),
        ({"AGENTRT_CONTROLLER_BACKENDS": "http://a:1 http://a:1"}, "unique"),
        ({"AGENTRT_CONTROLLER_SCRAPE_INTERVAL_S": "0"}, "scrape_interval_s"),
    ],
)
def test_bad_environment_is_rejected(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, env)


def test_unknown_variables_are_ignored_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {
        "AGENTRT_CONTROLLER_POLICYY": "plas",
        "AGENTRT_CONTROLLER_VERSION": "1",
        "AGENTRT_CONTROLLER_POLICY": "atlas",
    }
    with caplog.at_level("WARNING", logger="agentrt_controller.service.config"):
        config = load_config(None, env)
    assert config.policy == "atlas"
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "AGENTRT_CONTROLLER_POLICYY" in warnings[0]
    assert "AGENTRT_CONTROLLER_VERSION" in warnings[0]


def test_kubernetes_service_links_are_ignored_even_with_a_port_flag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {
        "AGENTRT_CONTROLLER_SERVICE_HOST": "10.0.0.1",
        "AGENTRT_CONTROLLER_SERVICE_PORT": "8000",
        "AGENTRT_CONTROLLER_SERVICE_PORT_HTTP": "8000",
        "AGENTRT_CONTROLLER_PORT": "tcp://10.0.0.1:8000",
        "AGENTRT_CONTROLLER_PORT_8000_TCP": "tcp://10.0.0.1:8000",
        "AGENTRT_CONTROLLER_PORT_8000_TCP_PROTO": "tcp",
        "AGENTRT_CONTROLLER_PORT_8000_TCP_PORT": "8000",
        "AGENTRT_CONTROLLER_PORT_8000_TCP_ADDR": "10.0.0.1",
    }
    with caplog.at_level("WARNING", logger="agentrt_controller.service.config"):
        assert load_config(None, env).port == 8080
        assert load_config(None, env, {"port": 9300}).port == 9300
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_lifecycle_settings() -> None:
    env = {"AGENTRT_CONTROLLER_BACKEND_STALL_S": "none", "AGENTRT_CONTROLLER_SHUTDOWN_GRACE_S": "5"}
    config = load_config(None, env)
    assert config.backend_stall_s is None
    assert config.shutdown_grace_s == 5.0
    assert load_config(None, {}).backend_stall_s == 30.0
    with pytest.raises(ConfigError, match="backend_stall_s"):
        load_config(None, {"AGENTRT_CONTROLLER_BACKEND_STALL_S": "0"})
    with pytest.raises(ConfigError, match="shutdown_grace_s"):
        load_config(None, {}, {"shutdown_grace_s": -1})


def test_unknown_file_key_is_rejected(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text("polcy = 'plas'\n")
    with pytest.raises(ConfigError, match="polcy"):
        load_config(file)
    file.write_text("not toml = = =")
    with pytest.raises(ConfigError, match="not valid"):
        load_config(file)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    "options",
    [
        {"policy": "lottery"},
        {"policy": "fcfs", "scheduling": {"starvation_beta": 2}},
        {"policy": "plas", "scheduling": {"boundaries": [1]}},
        {"router": "random"},
        {"cost": {"profile": "tpu-v9"}},
        {"admission_window": 4, "admission": {"min_window": 2}},
        {"admission_window": "adaptive", "admission": {"nope": 1}},
        {"backends": ()},
    ],
)
def test_policies_are_validated_when_the_app_is_built(options: dict[str, object]) -> None:
    from agentrt_controller.backends.spec import BackendSpec

    base: dict[str, object] = {"backends": (BackendSpec("http://a:1"),)}
    with pytest.raises(ConfigError):
        ControllerApp(ControllerConfig(**{**base, **options}))  # type: ignore[arg-type]


def test_cli_reports_config_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "serve", "--backend", "http://a:1", "--policy", "nope"]) == 2
    err = capsys.readouterr().err
    assert (
        "controller.policy: must be 'fcfs', 'mlfq', 'plas', 'atlas' or 'gittins', got 'nope'" in err
    )
    assert "(--policy)" in err
    assert main(["controller", "serve"]) == 2
    assert "no backend" in capsys.readouterr().err


def test_errors_name_the_key_path_and_its_source(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(
        "[controller.scheduling]\nbetta = 3\n[controller.retention_options]\nmax_ttl_s = -1\n"
        "[[controller.backends]]\nurl = 'http://a:1'\npriority = 'maybe'\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(file)
    message = str(caught.value)
    assert f"controller.scheduling.betta: unknown key (file {file})" in message
    assert "controller.retention_options.max_ttl_s: must be > 0, got -1" in message
    assert "controller.backends.0.priority: backend option priority must be on" in message
    env = {"AGENTRT_CONTROLLER_BREAKER": '{"window": 0}'}
    with pytest.raises(ConfigError, match=r"controller\.breaker\.window: must be >= 1, got 0 "
                       r"\(AGENTRT_CONTROLLER_BREAKER\)"):  # fmt: skip
        load_config(None, env)
    with pytest.raises(
        ConfigError, match=r"controller\.admission\.nope: unknown key \(--admission\)"
    ):
        load_config(None, {}, {"admission": '{"nope": 1}'})


def test_sections_given_as_tables_are_typed_on_construction() -> None:
    config = ControllerConfig(
        scheduling={"boundaries_s": [1, 4], "quanta_tokens": [8, 16, 32]},
        cost={"prefill_s_per_token": 2e-4},
        retention_options={"max_ttl_s": 60},
        tenant_isolation={"reservation_s": 1},
    )
    assert config.scheduling.boundaries_s == (1.0, 4.0)
    assert config.cost.prefill_s_per_token == 2e-4
    # a retention table without a prefill rate takes the cost model's, as the default does
    assert config.retention_config.prefill_s_per_token == 2e-4
    assert ControllerConfig(cost={"prefill_s_per_token": 3e-4}).retention_config == (
        RetentionConfig(prefill_s_per_token=3e-4)
    )
    assert config.tenant_isolation.enabled and config.tenant_isolation.reservation_s == 1.0
    assert not ControllerConfig(tenant_isolation={}).tenant_isolation.enabled
    with pytest.raises(ConfigError, match=r"^scheduling\.quanta_tokens\.0: must be >= 1, got 0$"):
        ControllerConfig(scheduling={"quanta_tokens": [0, 1, 2, 3, 4]})
    with pytest.raises(ConfigError, match=r"^routing\.nope: unknown key$"):
        ControllerConfig(routing={"nope": 1})


def test_a_bad_secret_is_refused_without_showing_it(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text("api_key = 123456789\n")
    with pytest.raises(ConfigError) as caught:
        load_config(file)
    assert str(caught.value) == (
        f"controller.api_key: input should be a valid string (file {file})"
    )
