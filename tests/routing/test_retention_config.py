"""Retention settings out of range are refused when the controller's config is built (at
start-up), naming the field; the simulator builds the same section."""

from __future__ import annotations

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.retention import RetentionConfig
from agentrt_controller.retention.policy import reload_s_per_token_of
from agentrt_controller.service import ControllerConfig

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_ttl_s": 1e9}, "retention_options.max_ttl_s: must be <= 86400"),
        ({"max_ttl_s": 0}, "retention_options.max_ttl_s: must be > 0"),
        ({"reload_s_per_token": -1e-6}, "retention_options.reload_s_per_token"),
        ({"max_pinned_fraction": 1.5}, "retention_options.max_pinned_fraction: must be <= 1"),
        ({"queue_weight": -0.5}, "retention_options.queue_weight: must be >= 0"),
        ({"queue_wait_s": 1e6}, "retention_options.queue_wait_s: must be <= 3600"),
        ({"max_usage": 0.9}, "retention_options.max_usage: unknown key"),  # the old gate
    ],
)
def test_a_bad_retention_setting_is_refused_at_start_up_naming_the_field(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        ControllerConfig(backends=(), retention_options=options)  # type: ignore[arg-type]


def test_the_tier_rate_of_a_profile_and_an_unknown_profile() -> None:
    assert reload_s_per_token_of("h100-llama3-8b") == pytest.approx(131072 / 50e9)
    assert reload_s_per_token_of("unit-step") == 0.0  # no cost model of a tier
    with pytest.raises(ConfigError, match="unknown hardware profile 'nope'"):
        reload_s_per_token_of("nope")
    tiered = RetentionConfig.from_mapping(
        {"reload_s_per_token": reload_s_per_token_of("a100-llama3-8b")}
    )
    assert tiered.reload_s_per_token == pytest.approx(5.24288e-06)
