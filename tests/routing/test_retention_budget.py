"""What retention keeps, and the per-tenant byte budget (docs/routing.md, "KV retention").

* the executor keeps only the parts of a prompt a pin or a re-warm replays (never another
  field of the body), and nothing for a backend that can neither pin nor re-warm;
* the pure driver charges each kept prompt to its program's tenant: over the budget the
  tenant's oldest are dropped (their retention is window-only), another tenant's never;
  program end returns the bytes.
"""

from __future__ import annotations

import json

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionConfig, RetentionDecision, WaitInfo
from agentrt_controller.retention.driver import (
    BackendTraits,
    RetentionDriver,
    ThreadContext,
    ToolWait,
)
from agentrt_controller.service.core.retention import KeptPrompt, keep_prompt

pytestmark = pytest.mark.timeout(10)


class PinAll:
    """Retain and pin every wait for 60 s."""

    name = "pin_all"

    def on_wait_start(self, facts: WaitInfo, now_s: float) -> RetentionDecision:
        return RetentionDecision(ttl_s=60.0, pin=True, reason="pin")

    def on_wait_end(
        self, program: ProgramKey, thread_id: str, node_id: str, duration_s: float, now_s: float
    ) -> None:
        return None

    def on_call_arrived(self, program: ProgramKey, thread_id: str, now_s: float) -> None:
        return None

    def on_program_end(self, program: ProgramKey, now_s: float) -> None:
        return None


def _driver(budget: int | None, traits: BackendTraits) -> RetentionDriver:
    return RetentionDriver(PinAll(), lambda _: traits, lambda key, until: None,
                           kept_bytes_per_tenant=budget)  # fmt: skip


def _key(tenant: str | None, program: str) -> ProgramKey:
    return ProgramKey(session_id="s", program_id=program, tenant=tenant)


def _context(size: int) -> ThreadContext:
    return ThreadContext("b0", 500, payload=object(), kept_bytes=size)


def _pins(driver: RetentionDriver, key: ProgramKey, now_s: float = 0.0) -> list[str]:
    wait = ToolWait(key, "main", "t", "tool", "search", 5.0)
    return [a.kind for a in driver.on_tool_start(wait, now_s)]


# --- what is kept ------------------------------------------------------------------------

BIG = "x" * 100_000


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "ignored": BIG,
             "tools": [{"type": "function"}], "cache_salt": "salt", "temperature": 0.5},
            KeptPrompt(messages=[{"role": "user", "content": "hi"}], tools=[{"type": "function"}],
                       cache_salt="salt", model="m"),
        ),
        ({"model": "m", "prompt": "text", "ignored": BIG}, KeptPrompt(prompt="text", model="m")),
        ({"prompt": [1, 2, 3], "ignored": BIG}, KeptPrompt(token_ids=(1, 2, 3))),
        ({"prompt": ["a", "b"]}, None),  # a batch of prompts: no one prefix to keep
        ({"model": "m", "ignored": BIG}, None),
    ],
)  # fmt: skip
def test_only_what_a_pin_or_a_rewarm_replays_is_kept(
    body: dict[str, object], expected: KeptPrompt | None
) -> None:
    kept = keep_prompt(body)
    if expected is None:
        assert kept is None
        return
    assert kept is not None
    fields = ("messages", "tools", "prompt", "token_ids", "cache_salt", "model")
    assert {f: getattr(kept, f) for f in fields} == {f: getattr(expected, f) for f in fields}
    # The charge is the kept parts' JSON size: the ignored field is neither kept nor charged.
    assert 0 < kept.size_bytes < 200
    assert BIG not in repr(kept) and "hi" not in repr(kept)


def test_a_rewarm_replays_the_kept_prompt_and_nothing_else() -> None:
    kept = keep_prompt({"model": "m", "messages": [{"role": "user", "content": "q"}],
                        "cache_salt": "s", "n": 4, "max_completion_tokens": 900})  # fmt: skip
    assert kept is not None
    assert kept.rewarm_body() == (
        "/v1/chat/completions",
        {"max_tokens": 1, "stream": False, "model": "m", "cache_salt": "s",
         "messages": [{"role": "user", "content": "q"}]},
    )  # fmt: skip
    ids = keep_prompt({"prompt": [5, 6]})
    assert ids is not None
    assert ids.rewarm_body() == ("/v1/completions", {"max_tokens": 1, "stream": False,
                                                     "prompt": [5, 6]})  # fmt: skip


def test_the_size_counts_utf8_bytes() -> None:
    kept = keep_prompt({"prompt": "é" * 1000})
    assert kept is not None
    encoded = json.dumps([None, None, "é" * 1000, None, None, None], ensure_ascii=False)
    assert kept.size_bytes == len(encoded.replace(", ", ",").encode())


# --- the budget ----------------------------------------------------------------------------


def test_over_budget_the_tenants_oldest_are_dropped_and_retained_window_only() -> None:
    driver = _driver(1000, BackendTraits(pins=True))
    a1, a2, a3 = _key("a", "p1"), _key("a", "p2"), _key("a", "p3")
    driver.on_finish(a1, "main", _context(400))
    driver.on_finish(a2, "main", _context(400))
    assert driver.kept_bytes_of("a") == 800
    driver.on_finish(a3, "main", _context(400))  # 1,200 > 1,000: a1's is dropped
    assert (driver.kept_bytes_of("a"), driver.kept_dropped) == (800, 1)
    assert _pins(driver, a1) == []  # window only: nothing to pin with
    assert len(driver) == 1  # ... but the window holds
    assert _pins(driver, a2) == ["pin"]
    assert _pins(driver, a3) == ["pin"]


def test_a_live_retention_loses_its_payload_when_its_context_is_dropped() -> None:
    driver = _driver(1000, BackendTraits(rewarm=True))
    a1, a2 = _key("a", "p1"), _key("a", "p2")
    driver.on_finish(a1, "main", _context(600))
    assert _pins(driver, a1) == []  # a re-warm is due later
    retention = driver.tracker.get(a1, "main")
    assert retention is not None and retention.payload is not None
    driver.on_finish(a2, "main", _context(600))
    assert retention.payload is None
    assert driver.tick(10.0) == []  # no re-warm without a prompt


def test_one_tenants_contexts_never_evict_anothers() -> None:
    driver = _driver(1000, BackendTraits(pins=True))
    victim = _key("a", "p1")
    driver.on_finish(victim, "main", _context(900))
    for program in range(20):
        driver.on_finish(_key("b", f"p{program}"), "main", _context(700))
    assert driver.kept_bytes_of("a") == 900
    assert driver.kept_bytes_of("b") == 700
    assert driver.kept_dropped == 19
    assert _pins(driver, victim) == ["pin"]


@pytest.mark.parametrize(
    ("budget", "size", "kept"), [(1000, 1001, 0), (0, 1, 0), (1000, 1000, 1000)]
)
def test_a_prompt_larger_than_the_whole_budget_is_not_kept(
    budget: int, size: int, kept: int
) -> None:
    driver = _driver(budget, BackendTraits(pins=True))
    key = _key("a", "p")
    driver.on_finish(key, "main", _context(size))
    assert driver.kept_bytes_of("a") == kept
    assert _pins(driver, key) == (["pin"] if kept else [])


def test_a_threads_next_call_and_the_programs_end_return_its_bytes() -> None:
    driver = _driver(10_000, BackendTraits(pins=True))
    key = _key(None, "p")
    driver.on_finish(key, "main", _context(300))
    driver.on_finish(key, "main", _context(500))  # replaces, never adds up
    driver.on_finish(key, "side", _context(200))
    assert driver.kept_bytes_of(None) == 700
    driver.on_program_end(key, 1.0)
    assert driver.kept_bytes == 0


def test_the_budget_is_validated_at_load() -> None:
    with pytest.raises(ConfigError, match="kept_bytes_per_tenant"):
        RetentionConfig.from_mapping({"kept_bytes_per_tenant": -1})
    assert RetentionConfig().kept_bytes_per_tenant == 64 * 1024 * 1024
    with pytest.raises(ConfigError):
        _driver(-1, BackendTraits())


def test_an_ended_retention_keeps_no_prompt() -> None:
    driver = _driver(None, BackendTraits(pins=True))
    key = _key("a", "p")
    driver.on_finish(key, "main", _context(100))
    _pins(driver, key)
    first = driver.tracker.get(key, "main")
    _pins(driver, key, 1.0)  # a new wait replaces it
    second = driver.tracker.get(key, "main")
    driver.on_admitted(key, "main", 2.0)  # the thread came back
    assert first is not None and second is not None and first is not second
    assert (first.payload, second.payload) == (None, None)
