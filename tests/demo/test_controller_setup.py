"""The demo's controller runs the product defaults unless an option chooses otherwise."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller import defaults
from agentrt_controller.service import load_config
from agentrt_demo.cluster import controller_setup
from agentrt_demo.settings import DemoSettings

pytestmark = pytest.mark.timeout(30)

URLS = ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]


def test_the_default_run_passes_no_policy_option_and_no_backend_kind() -> None:
    settings = DemoSettings()
    setup = controller_setup(settings, URLS)
    # What `serve --backend URL` gets, at the emulated engines' time scale.
    assert setup.overrides == {"port": 0, "backends": URLS, "time_scale": settings.time_scale}
    assert setup.chosen == ()
    config = load_config(env={}, overrides=setup.overrides)
    assert all(b.detect_kind and b.priority is False for b in config.backends)
    expected = defaults.describe(
        policy=defaults.POLICY,
        admission_window=defaults.ADMISSION_WINDOW,
        router=defaults.ROUTER,
        retention=defaults.RETENTION,
        priority="off",
    )
    assert setup.describe() == expected + " (the product defaults)"


def test_options_choose_other_settings() -> None:
    settings = DemoSettings(
        policy="atlas", router="round_robin", retention=False, admission_window=8, priority=True
    )
    setup = controller_setup(settings, URLS)
    assert setup.overrides == {
        "port": 0,
        "backends": [f"{u},priority=on" for u in URLS],
        "time_scale": settings.time_scale,
        "policy": "atlas",
        "router": "round_robin",
        "retention": "off",
        "admission_window": 8,
    }
    text = setup.describe()
    assert text.startswith("policy=atlas window=8 router=round_robin retention=off priority=on")
    assert "but policy=atlas, router=round_robin, retention=off, admission_window=8" in text
    unlimited = controller_setup(DemoSettings(admission_window=None), URLS)
    assert "window=unlimited" in unlimited.describe()


def test_a_choice_the_controller_refuses_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"controller\.router: must be 'prefix'"):
        controller_setup(DemoSettings(router="nope"), URLS)
