"""The admission window, one type: its spellings, as the controller's config, the demo's
``--window`` and the start-up line take them."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.admission_window import (
    AdmissionWindow,
    parse_admission_window,
    window_label,
)
from agentrt_controller.service import load_config
from agentrt_demo.settings import DemoSettings

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("value", "window", "label"),
    [
        (8, 8, "8"),
        ("8", 8, "8"),
        ("adaptive", "adaptive", "adaptive"),
        (None, None, "unlimited"),
        ("unlimited", None, "unlimited"),
        ("none", None, "unlimited"),
        ("INF", None, "unlimited"),
    ],
)
def test_spellings(value: object, window: AdmissionWindow, label: str) -> None:
    assert parse_admission_window(value) == window
    assert window_label(window) == label
    if value is not None:  # an override of None means "not given" to load_config
        config = load_config(env={}, overrides={"admission_window": value})
        assert config.admission_window == window
    settings = DemoSettings(admission_window=window)
    assert settings.window_choice() == (window if isinstance(window, int) else label)


@pytest.mark.parametrize("value", ["wide", "Adaptive", 1.5, True, [8]])
def test_anything_else_is_refused_naming_its_source(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^--window must be N, adaptive or unlimited, got "):
        parse_admission_window(value, name="--window")


def test_the_demo_default_is_the_controllers() -> None:
    assert DemoSettings().admission_window == "default"
    assert DemoSettings().window_choice() is None
