"""The alert rules, the scrape configuration and the Grafana dashboard in ``deploy/`` hold up.

``promtool`` checks the rules and the scrape config and runs the rules' unit tests
(``deploy/prometheus/alerts.test.yml``); skipped without Debian's ``prometheus`` package unless
``AGENTRT_REQUIRE_PROMETHEUS=1``. Every metric a dashboard panel or an alert names must be one a
running controller or emulator exports: their ``/metrics`` are scraped live and compared with the
names parsed from each PromQL expression (this part needs no Prometheus).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops.test_prometheus_scrape import PROMETHEUS_DIR, driven_stack, prometheus_tools

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "agentrt.json"
#: Series Prometheus makes itself rather than scraping them.
SYNTHETIC = {"up", "ALERTS", "ALERTS_FOR_STATE"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def promtool(*args: str, cwd: Path = PROMETHEUS_DIR) -> str:
    """``promtool args`` in ``cwd``; its output; fails the test on a non-zero exit."""
    tools = prometheus_tools()
    done = subprocess.run(
        [tools.promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def metric_names(promql: str) -> set[str]:
    """The metric names a PromQL expression selects (crudely: strings, label matchers, ranges,
    grouping clauses and Grafana variables removed; identifiers not followed by ``(``, not
    keywords, not the unit of a number or duration)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        before = text[match.start() - 1] if match.start() else " "
        if before.isdigit() or before == ".":
            continue  # 1e-9, offset 10m
        if text[match.end() :].lstrip().startswith("(") or match.group() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def dashboard_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, also those nested in collapsed rows."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_expressions() -> dict[str, str]:
    """``{"panel title / refId": PromQL}`` of every dashboard query, the template variables'
    ``label_values(selector, label)`` as their selector."""
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = {
        f"{panel['title']} / {target['refId']}": target["expr"]
        for panel in dashboard_panels(dashboard)
        for target in panel.get("targets", [])
    }
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            selector = re.fullmatch(r"label_values\((.+),\s*\w+\)", query)
            assert selector is not None, query
            expressions[f"variable {variable['name']}"] = selector.group(1)
    return expressions


def alert_expressions() -> dict[str, str]:
    """``{alert name: PromQL}`` of the shipped alert rules."""
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.rules.yml").read_text())
    return {rule["alert"]: rule["expr"] for group in rules["groups"] for rule in group["rules"]}


def exported_names(exposition: str) -> set[str]:
    """Every series name a ``/metrics`` text can carry: its samples' names, and for each family
    (also one with no sample yet) its name and, for histograms, ``_bucket``, ``_count``,
    ``_sum``."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "histogram":
                names |= {name + "_bucket", name + "_count", name + "_sum"}
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_the_metric_name_parser_finds_names_and_only_names() -> None:
    expression = (
        'sum by (instance, le) (rate(agentrt_controller_queue_wait_seconds_bucket{job="a", '
        'instance=~"$instance"}[$__rate_interval])) / clamp_min(vllm:num_requests_waiting '
        "offset 10m, 1e-9) > bool 0.5 unless on (backend) agentrt_controller_backend_up"
    )
    assert metric_names(expression) == {
        "agentrt_controller_queue_wait_seconds_bucket",
        "vllm:num_requests_waiting",
        "agentrt_controller_backend_up",
    }


def test_promtool_checks_the_rules_and_the_scrape_config() -> None:
    assert "SUCCESS: 12 rules found" in promtool("check", "rules", "alerts.rules.yml")
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml")


def test_promtool_runs_the_alert_unit_tests() -> None:
    assert "SUCCESS" in promtool("test", "rules", "alerts.test.yml")


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    tests = yaml.safe_load((PROMETHEUS_DIR / "alerts.test.yml").read_text())
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert fired == set(alert_expressions())


async def live_expositions() -> tuple[str, str]:
    """The ``/metrics`` texts of a controller and the emulator behind it, after a few calls."""
    async with driven_stack() as (http, controller, engine):
        return (
            (await http.get(controller + "/metrics")).text,
            (await http.get(engine + "/metrics")).text,
        )


def families(exposition: str) -> set[str]:
    """The metric families of a ``/metrics`` text (``# TYPE`` lines, ``_created`` left out)."""
    return {
        line.split()[2]
        for line in exposition.splitlines()
        if line.startswith("# TYPE ") and not line.split()[2].endswith("_created")
    }


def documented(doc: str) -> set[str]:
    """The metric names in the first column of the table under ``doc``'s "Metrics" heading."""
    text = (ROOT / "docs" / doc).read_text()
    section = re.split(r"^## Metrics.*$", text, maxsplit=1, flags=re.MULTILINE)[1]
    section = section.split("\n## ", 1)[0]
    names: set[str] = set()
    for row in re.findall(r"^\| (`[^|]+)\|", section, re.MULTILINE):
        names |= {re.sub(r"\{.*", "", name) for name in re.findall(r"`([^`]+)`", row)}
    return names


@pytest.mark.anyio
async def test_the_metrics_tables_in_the_docs_match_the_live_expositions() -> None:
    controller, engine = await live_expositions()
    assert documented("controller.md") == families(controller)
    # the stack here has no KV CPU tier: the one family the emulator publishes only with
    # --kv-offloading-size (its docs row says so) is absent
    only_with_a_tier = {"agentrt_engine_kv_reload_s_per_token"}
    assert documented("engine-emulator.md") - only_with_a_tier == families(engine)


@pytest.mark.anyio
async def test_every_metric_the_dashboard_and_the_alerts_name_is_exported() -> None:
    controller, engine = await live_expositions()
    exported = exported_names(controller) | exported_names(engine)
    assert "agentrt_controller_call_e2e_seconds_bucket" in exported
    assert "vllm:kv_cache_usage_perc" in exported
    expressions = {**dashboard_expressions(), **alert_expressions()}
    named = {where: metric_names(expr) for where, expr in expressions.items()}
    assert all(named.values()), [where for where, names in named.items() if not names]
    unknown = {
        where: sorted(names - exported - SYNTHETIC)
        for where, names in named.items()
        if names - exported - SYNTHETIC
    }
    assert unknown == {}
    used = set().union(*named.values())
    assert len(used) >= 30, sorted(used)
