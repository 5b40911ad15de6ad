"""Learned retention statistics are per tenant (docs/security.md, "Shared learned statistics").

The hostile probe, as a pure policy: tenant B runs programs under A's program kind and tool
name whose waits never return (or last far longer); A's decisions stay what they are without
B. Only when B opts in to sharing (``share_statistics``) and A has no samples of its own do
B's samples inform A's prior. The caps keep what is learned bounded, and a tenant inventing
names pushes out only its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from agentrt.errors import ConfigError
from agentrt_controller.keys import ProgramKey
from agentrt_controller.retention import RetentionConfig, ToolWaitFacts, TtlRetentionPolicy
from agentrt_controller.retention.api import RetentionDecision
from agentrt_controller.retention.learned import TenantTables
from agentrt_controller.service.core.tenants import hash_key, parse_key_file

pytestmark = pytest.mark.timeout(30)

KIND, TOOL = "react", "search"


def _facts(tenant: str | None, program_id: str, node_id: str = "t1") -> ToolWaitFacts:
    return ToolWaitFacts(
        program=ProgramKey(session_id="s", program_id=program_id, tenant=tenant),
        thread_id="main",
        node_id=node_id,
        kind="tool",
        name=TOOL,
        predicted_duration_s=None,
        context_tokens=2000,
        backend_id="b0",
        kv_cache_usage=0.2,
        program_kind=KIND,
    )


@dataclass(frozen=True)
class Traffic:
    """``programs`` programs of ``tenant``, each one wait of ``duration_s`` (``None`` = the
    tool never ends) after which the program comes back (``returns``) or ends."""

    tenant: str | None
    programs: int
    duration_s: float | None
    returns: bool


def _run(policy: TtlRetentionPolicy, traffic: Traffic) -> None:
    for i in range(traffic.programs):
        facts = _facts(traffic.tenant, f"{traffic.tenant}-{i}")
        t = float(i)
        policy.on_wait_start(facts, t)
        if traffic.duration_s is not None:
            policy.on_wait_end(facts.program, "main", "t1", traffic.duration_s, t + 1)
        if traffic.returns:
            policy.on_call_arrived(facts.program, "main", t + 1)
        policy.on_program_end(facts.program, t + 2)


def _decision_of_a(sharing: frozenset[str], *traffic: Traffic) -> RetentionDecision:
    policy = TtlRetentionPolicy(RetentionConfig(slack_s=0.5), sharing_tenants=sharing)
    for part in traffic:
        _run(policy, part)
    return policy.decide(_facts("a", "a-next"))


#: B's programs whose waits never return (the probe: 60 of them), and B's waits of 100 s.
B_NEVER_RETURNS = Traffic("b", 60, None, returns=False)
B_SLOW_TOOL = Traffic("b", 60, 100.0, returns=True)
#: A's own history: 2-s waits that come back.
A_OWN = Traffic("a", 10, 2.0, returns=True)


@pytest.mark.parametrize(
    ("sharing", "before", "b_traffic"),
    [
        # nobody shares: B's traffic is B's alone, with or without history of A's own
        (frozenset(), (), B_NEVER_RETURNS),
        (frozenset(), (), B_SLOW_TOOL),
        (frozenset(), (A_OWN,), B_NEVER_RETURNS),
        (frozenset(), (A_OWN,), B_SLOW_TOOL),
        # A shares, B does not: still nothing of B's reaches A
        (frozenset({"a"}), (), B_NEVER_RETURNS),
        (frozenset({"a"}), (A_OWN,), B_SLOW_TOOL),
        # B shares, but A has enough samples of its own: its own decide
        (frozenset({"b"}), (A_OWN,), B_NEVER_RETURNS),
        (frozenset({"b"}), (A_OWN,), B_SLOW_TOOL),
    ],
)
def test_tenant_bs_waits_under_as_names_leave_as_decision_unchanged(
    sharing: frozenset[str], before: tuple[Traffic, ...], b_traffic: Traffic
) -> None:
    alone = _decision_of_a(sharing, *before)
    assert alone.reason == "retain" and alone.ttl_s > 0
    assert _decision_of_a(sharing, *before, b_traffic) == alone
    # ... in either order of the traffic
    assert _decision_of_a(sharing, b_traffic, *before) == alone


@pytest.mark.parametrize(
    ("b_traffic", "reason", "ttl_s"),
    [
        # B's programs never come back: A's prior says A's will not either
        (B_NEVER_RETURNS, "unlikely_return", 0.0),
        # B's tool takes 100 s: A's window covers it (0.95 quantile + 0.5 s slack)
        (B_SLOW_TOOL, "retain", 100.5),
    ],
)
def test_a_sharing_tenants_samples_inform_the_prior_of_a_tenant_without_its_own(
    b_traffic: Traffic, reason: str, ttl_s: float
) -> None:
    alone = _decision_of_a(frozenset({"b"}))
    assert (alone.reason, alone.ttl_s) == ("retain", pytest.approx(2.0 * 2.996 + 0.5, rel=1e-3))
    informed = _decision_of_a(frozenset({"b"}), b_traffic)
    assert (informed.reason, informed.ttl_s) == (reason, pytest.approx(ttl_s))


def test_the_prior_serves_only_names_with_too_few_own_samples() -> None:
    policy = TtlRetentionPolicy(RetentionConfig(min_samples=3), sharing_tenants={"b"})
    _run(policy, B_NEVER_RETURNS)
    assert policy.returns.shared_counts(f"{KIND}/{TOOL}") == (0, 60)
    _run(policy, Traffic("a", 2, 2.0, returns=True))  # 2 < 3 own samples: the prior rules
    assert policy.decide(_facts("a", "x")).reason == "unlikely_return"
    _run(policy, Traffic("a", 1, 2.0, returns=True))  # the third: its own history decides
    assert policy.decide(_facts("a", "x")).reason == "retain"


def test_the_hostile_tenant_itself_stops_being_retained() -> None:
    policy = TtlRetentionPolicy()
    _run(policy, B_NEVER_RETURNS)
    assert policy.decide(_facts("b", "b-next")).reason == "unlikely_return"
    assert policy.decide(_facts("a", "a-next")).reason == "retain"
    snapshot = policy.snapshot()
    assert snapshot["decisions_by_tenant"] == {"b": {"retain": 16, "unlikely_return": 44}}
    assert snapshot["learned"] == {
        "durations": {"tenants": 0, "names": 0, "shared_names": 0},  # no wait ever ended
        "returns": {"tenants": 1, "names": 1, "shared_names": 0},
        "sharing_tenants": [],
    }


def test_the_simulators_one_tenant_learns_as_before() -> None:
    """``None`` is one tenant: its own samples decide, nothing is shared."""
    policy = TtlRetentionPolicy()
    _run(policy, Traffic(None, 20, 1.0, returns=False))
    assert policy.returns.counts(f"{KIND}/{TOOL}") == (0, 20)
    assert policy.durations.count(TOOL) == 20
    assert policy.decide(_facts(None, "next")).reason == "unlikely_return"
    assert policy.snapshot()["decisions_by_tenant"] == {"": {"retain": 16, "unlikely_return": 4}}


def test_learned_names_are_capped_per_tenant_and_in_all() -> None:
    tables: TenantTables[list[int]] = TenantTables(
        lambda: [0], max_names_per_tenant=4, max_names=10
    )
    for name in ("x", "y"):
        tables.write("a", name)[0] += 1
    for i in range(100):  # B invents names: it pushes out only its own
        tables.write("b", f"n{i}")[0] += 1
    assert tables.get("a", "x") == [1] and tables.get("a", "y") == [1]
    assert len(tables) == 6 and tables.get("b", "n0") is None and tables.get("b", "n99") == [1]
    for tenant in ("c", "d"):
        for name in ("p", "q", "r"):
            tables.write(tenant, name)
    # 12 > 10: the biggest tenant (B, 4 names) lost its oldest twice; A kept its two
    assert len(tables) == 10 and tables.tenants == 4
    assert tables.get("a", "x") == [1] and tables.get("b", "n96") is None
    assert tables.get("b", "n98") == [1]


def test_policy_caps_come_from_the_retention_options() -> None:
    config = RetentionConfig.from_mapping(
        {"max_learned_names_per_tenant": 2, "max_learned_names": 3}
    )
    policy = TtlRetentionPolicy(config)
    for tool in ("t1", "t2", "t3"):
        program = ProgramKey(session_id="s", program_id=tool, tenant="a")
        facts = ToolWaitFacts(program, "main", "n", "tool", tool, None, 2000, "b0", 0.1)
        policy.on_wait_start(facts, 0.0)
        policy.on_wait_end(program, "main", "n", 1.0, 1.0)
    assert policy.durations.count("t1", tenant="a") == 0  # forgotten: 2 names per tenant
    assert policy.durations.count("t3", tenant="a") == 1
    with pytest.raises(ConfigError, match="max_learned_names"):
        RetentionConfig(max_learned_names=0)


def test_share_statistics_in_the_tenants_file() -> None:
    text = f"""
[tenants.alice]
keys = ["{hash_key("key-a")}"]
share_statistics = true

[tenants.bob]
keys = ["{hash_key("key-b")}"]
"""
    tenants, _keys = parse_key_file(text, "keys.toml")
    assert tenants["alice"].share_statistics and not tenants["bob"].share_statistics
    bad = text.replace("share_statistics = true", 'share_statistics = "yes"')
    with pytest.raises(ConfigError, match=r"keys.toml, line 2: .*share_statistics must be true"):
        parse_key_file(bad, "keys.toml")
