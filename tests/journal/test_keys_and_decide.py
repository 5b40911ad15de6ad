"""Pure parts: canonical keys, result encoding, the protocol decision table."""

from __future__ import annotations

import math

import pytest

from agentrt.errors import ResultNotSerializable
from agentrt.journal import StepPosition, StepRecord, StepSpec, StepStatus
from agentrt.journal.decide import Action, decide, mismatch_message
from agentrt.journal.keys import (
    ArgumentsNotSerializable,
    arguments_hash,
    encode_result,
    idempotency_key,
)
from agentrt.tools.durations import predict_duration

pytestmark = pytest.mark.timeout(10)


def test_arguments_hash_is_canonical() -> None:
    assert arguments_hash({"a": 1, "b": [1, 2]}) == arguments_hash({"b": [1, 2], "a": 1})
    assert arguments_hash({"a": 1}) != arguments_hash({"a": 2})
    assert arguments_hash({"a": 1.0}) != arguments_hash({"a": "1.0"})
    with pytest.raises(ArgumentsNotSerializable):
        arguments_hash({"a": object()})
    with pytest.raises(ArgumentsNotSerializable):
        arguments_hash({"a": math.nan})


def test_idempotency_key_depends_on_every_part_of_the_identity() -> None:
    base = ("prog", "main", 3, "tool", "send_email", arguments_hash({"to": "x"}))
    key = idempotency_key(*base)
    assert key == idempotency_key(*base)  # stable across calls (and processes: sha256)
    assert key.startswith("agentrt-") and len(key) == 72
    variants = {
        idempotency_key("prog2", *base[1:]),
        idempotency_key(base[0], "main.0", *base[2:]),
        idempotency_key(*base[:2], 4, *base[3:]),
        idempotency_key(*base[:3], "llm", *base[4:]),
        idempotency_key(*base[:4], "charge", base[5]),
        idempotency_key(*base[:5], arguments_hash({"to": "y"})),
    }
    assert key not in variants and len(variants) == 6
    # Golden value: a key must never change between releases (providers store it).
    assert idempotency_key("p", "main", 0, "tool", "t", arguments_hash({})) == (
        "agentrt-42980769c736797fcf3491b342521be4d44673e7b8e4a54c1acb0dc384ec2150"
    )


@pytest.mark.parametrize(
    "value",
    [None, True, 3, 2.5, "é", [1, "a", None], {"a": {"b": [1.5, False]}}],
)
def test_encode_result_accepts_plain_json(value: object) -> None:
    import json

    assert json.loads(encode_result(value, what="t")) == value


@pytest.mark.parametrize(
    "value",
    [{1, 2}, (1, 2), {"a": (1,)}, {1: "x"}, object(), math.inf, b"bytes", {"a": math.nan}],
)
def test_encode_result_refuses_what_would_not_replay_equal(value: object) -> None:
    with pytest.raises(ResultNotSerializable):
        encode_result(value, what="tool 'x'")


def _record(
    status: StepStatus, *, name: str = "send", args_hash: str = "h", side_effect: bool = True
) -> StepRecord:
    return StepRecord(
        position=StepPosition("p", "main", 0),
        kind="tool",
        name=name,
        args_hash=args_hash,
        key="k",
        status=status,
        side_effect=side_effect,
        idempotent=False,
        attempts=1,
        node_id="",
        result_json=None,
        error_type=None,
        error_message=None,
        owner="o",
        created_at=0.0,
        started_at=0.0,
        updated_at=0.0,
        duration_s=None,
    )


def _spec(*, side_effect: bool = True, idempotent: bool = False, name: str = "send") -> StepSpec:
    return StepSpec(
        "p", "main", 0, "tool", name, {}, side_effect=side_effect, idempotent=idempotent
    )


S, C, F = StepStatus.STARTED, StepStatus.COMMITTED, StepStatus.FAILED


@pytest.mark.parametrize(
    ("status", "side_effect", "idempotent", "has_reconcile", "expected"),
    [
        (None, True, False, False, Action.RUN_NEW),
        (None, False, False, False, Action.RUN_NEW),
        (C, True, False, False, Action.REPLAY),
        (C, False, False, False, Action.REPLAY),
        (F, True, False, False, Action.RETRY),
        (F, False, False, False, Action.RETRY),
        (S, True, False, True, Action.RECONCILE),
        (S, True, True, True, Action.RECONCILE),  # the hook knows better than a blind re-run
        (S, True, True, False, Action.RERUN),
        (S, True, False, False, Action.UNKNOWN),
        (S, False, False, False, Action.RERUN),  # read-only, recorded as read-only
    ],
)
def test_decision_table(
    status: StepStatus | None,
    side_effect: bool,
    idempotent: bool,
    has_reconcile: bool,
    expected: Action,
) -> None:
    record = None if status is None else _record(status, side_effect=side_effect)
    step = _spec(side_effect=side_effect, idempotent=idempotent)
    assert decide(record, step, "h", has_reconcile=has_reconcile) is expected


def test_started_side_effect_stays_unknown_even_if_now_declared_read_only() -> None:
    assert decide(_record(S), _spec(side_effect=False), "h", has_reconcile=False) is (
        Action.UNKNOWN
    )


@pytest.mark.parametrize("status", [S, C, F])
def test_mismatch_wins_over_status(status: StepStatus) -> None:
    assert decide(_record(status), _spec(name="charge"), "h", has_reconcile=True) is (
        Action.MISMATCH
    )
    assert decide(_record(status), _spec(), "other", has_reconcile=True) is Action.MISMATCH


def test_mismatch_message_names_both_steps_but_not_arguments() -> None:
    message = mismatch_message(_record(C, args_hash="a" * 64), _spec(name="charge"), "b" * 64)
    assert "'send'" in message and "'charge'" in message and "seq 0" in message
    assert "a different step" in message and "aaaaaaaaaaaa" in message


def test_predict_duration_is_the_median() -> None:
    assert predict_duration([]) is None
    assert predict_duration([1.0, 100.0, 2.0]) == 2.0
    assert predict_duration([1.0, 3.0]) == 2.0
