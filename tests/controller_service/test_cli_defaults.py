"""`agentrt controller serve`: the start-up line and --help name every policy choice."""

from __future__ import annotations

import pytest

from agentrt.cli import main
from agentrt_controller import defaults
from agentrt_controller.cli import banner
from agentrt_controller.service.config import load_config

pytestmark = pytest.mark.timeout(30)


def test_the_start_up_line_says_policy_window_router_retention_and_priority() -> None:
    config = load_config(env={}, overrides={"backends": ["http://127.0.0.1:8000"], "port": 9})
    assert banner(config) == (
        f"agentrt controller on http://127.0.0.1:9 policy={defaults.POLICY} "
        f"window={defaults.ADMISSION_WINDOW} router={defaults.ROUTER} "
        f"retention={defaults.RETENTION} priority=off backends=127.0.0.1:8000 "
        "tenants=open(one tenant 'default', no API keys)"
    )


def test_the_start_up_line_shows_explicit_choices_and_priority_per_backend() -> None:
    overrides = {
        "backends": ["http://a:1,priority=on", "http://b:2,priority=auto"],
        "policy": "fcfs",
        "admission_window": "unlimited",
        "router": "round_robin",
        "retention": "off",
    }
    line = banner(load_config(env={}, overrides=overrides))
    assert "policy=fcfs window=unlimited router=round_robin retention=off" in line
    assert "priority=a:1:on,b:2:auto" in line


def test_help_names_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["controller", "serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default {defaults.POLICY})" in text
    assert f"(default {defaults.ADMISSION_WINDOW}:" in text
    assert f"(default {defaults.ROUTER})" in text
    assert f"(default {defaults.RETENTION})" in text
    assert "Priority passthrough is off" in text
