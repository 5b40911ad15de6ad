"""Request validation, aborts and configuration errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentrt.errors import ConfigError, EngineError, InvalidRequest
from agentrt_emulator.core import EngineConfig, EngineCore, EngineRequest, get_profile

from .helpers import engine, request, run

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("case", "bad", "param"),
    [
        ("empty prompt", request("x", [], 3), "prompt"),
        ("empty output", request("x", 5, 0), "max_tokens"),
        ("longer than the context", request("x", 90, 11), "max_tokens"),
        ("prompt alone fills the context", request("x", 100, 1), "prompt"),
        ("more KV than the engine has", request("x", 60, 30), "max_tokens"),
        ("empty cache salt", request("x", 5, 3, cache_salt=""), "cache_salt"),
        ("duplicate id", request("dup", 5, 3), "request_id"),
    ],
)
def test_invalid_requests_are_rejected(case: str, bad: EngineRequest, param: str) -> None:
    # max_model_len 100 tokens, 5 blocks of 16 = 80 tokens of KV
    core = engine(max_model_len=100, num_gpu_blocks=5)
    core.add_request(request("dup", 5, 3))
    with pytest.raises(InvalidRequest) as info:
        core.add_request(bad)
    assert isinstance(info.value, EngineError)
    assert info.value.param == param, case
    assert info.value.status_code == 400
    assert core.num_waiting == 1  # nothing half-added


def test_largest_request_that_fits_is_accepted() -> None:
    core = engine(max_model_len=100, num_gpu_blocks=5)
    core.add_request(request("fits", 60, 21))  # 80 tokens of KV needed for 81 total tokens
    assert run(core).tokens == {"fits": 21}


def test_request_repr_hides_tokens() -> None:
    r = request("secret", [424242, 535353], 2)
    assert "424242" not in repr(r)
    core = engine()
    core.add_request(r)
    core.step(0.0)
    assert all("424242" not in repr(s) for s in core._sched.running)


def test_abort_running_request_frees_its_blocks() -> None:
    core = engine(num_gpu_blocks=10)
    core.add_request(request("a", 40, 50))
    core.add_request(request("b", list(range(500, 520)), 50, first_token=7))
    core.step(0.0)
    assert core.num_free_blocks == 10 - 3 - 2
    assert core.abort_request("a") is True
    assert core.num_free_blocks == 10 - 2
    assert core.num_running == 1
    result = core.step(1.0)
    assert result is not None and [p.request_id for p in result.progress] == ["b"]
    assert core.abort_request("a") is False
    assert core.abort_request("b") is True
    assert not core.has_unfinished()
    assert core.num_free_blocks == 10
    assert core.step(2.0) is None


def test_abort_waiting_request() -> None:
    for policy in ("fcfs", "priority"):
        core = engine(max_num_seqs=1, scheduling_policy=policy)
        core.add_request(request("a", 4, 2))
        core.add_request(request("b", 4, 2))
        core.add_request(request("c", 4, 2))
        core.step(0.0)
        assert core.abort_request("b") is True
        assert core.num_waiting == 1
        assert set(run(core, now_s=1.0).tokens) == {"a", "c"}
        # an aborted id may be used again
        core.add_request(request("b", 4, 2))
        assert run(core).tokens == {"b": 2}


def test_abort_unknown_request() -> None:
    assert engine().abort_request("never-seen") is False


@pytest.mark.parametrize(
    "changes",
    [
        {"block_size": 0},
        {"max_num_seqs": 0},
        {"max_num_batched_tokens": 0},
        {"max_model_len": 1},
        {"num_gpu_blocks": 0},
        {"gpu_memory_utilization": 0.0},
        {"gpu_memory_utilization": 1.5},
        {"scheduling_policy": "lifo"},
    ],
)
def test_bad_config_is_rejected(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        EngineCore(replace(EngineConfig(), **changes), get_profile("unit-step"))  # type: ignore[arg-type]
