"""A real Prometheus scrapes a controller and an emulator (docs/operations.md, "Metrics and
alerts").

Debian's ``prometheus`` binary runs on loopback with the shipped scrape configuration
(``deploy/prometheus/prometheus.yml``, its targets replaced by the test's servers and its
intervals shortened) and the shipped alert rules. After a few chat calls through the controller,
its HTTP API must show both targets up, the controller's histograms and build info, the
emulator's vLLM metrics, and every alert rule evaluated without error on the live series.

Skipped without ``prometheus`` / ``promtool`` on the ``PATH``, unless
``AGENTRT_REQUIRE_PROMETHEUS=1`` (``.ci/run`` installs the package and sets it): then it fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import yaml

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerConfig, serve_controller
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine
from tests.ops.processes import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
#: The jobs of the shipped scrape configuration; the alert rules select on them.
CONTROLLER_JOB = "agentrt-controller"
ENGINES_JOB = "agentrt-engines"
#: Chat calls driven through the controller: plain ones and streamed ones.
PLAIN_CALLS = 2
STREAMED_CALLS = 1


@dataclass(frozen=True)
class PrometheusTools:
    """Paths of the ``prometheus`` server and ``promtool`` binaries."""

    prometheus: str
    promtool: str


def prometheus_tools() -> PrometheusTools:
    """Debian's Prometheus binaries, or skip (fail under ``AGENTRT_REQUIRE_PROMETHEUS=1``)."""
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus and promtool:
        return PrometheusTools(prometheus, promtool)
    if os.environ.get("AGENTRT_REQUIRE_PROMETHEUS") == "1":
        pytest.fail("AGENTRT_REQUIRE_PROMETHEUS=1 but prometheus / promtool is not on the PATH")
    pytest.skip("no prometheus / promtool: apt-get install prometheus (.ci/run does)")


def scrape_config(controller: str, engine: str, rules: Path) -> dict[str, Any]:
    """The shipped ``prometheus.yml`` pointed at ``controller`` and ``engine`` (``host:port``),
    scraping and evaluating every 0.5 s, with ``rules`` as its only rule file."""
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="500ms", scrape_timeout="400ms",
                            evaluation_interval="500ms")  # fmt: skip
    config["rule_files"] = [str(rules)]
    targets = {CONTROLLER_JOB: [controller], ENGINES_JOB: [engine]}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == set(targets), "the shipped scrape config's jobs changed"
    for name, job in jobs.items():
        job["static_configs"] = [{"targets": targets[name]}]
    return config


@contextlib.asynccontextmanager
async def prometheus_server(
    binary: str, config: dict[str, Any], workdir: Path
) -> AsyncIterator[str]:
    """``prometheus`` on a free loopback port with ``config``, its data and log in ``workdir``;
    yields its URL once ``/-/ready`` answers 200; stopped with SIGTERM (killed after 5 s)."""
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_port()
    command = [binary, f"--config.file={config_file}", f"--storage.tsdb.path={workdir / 'data'}",
               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]  # fmt: skip
    # Its log goes to a file, not a pipe nobody reads while it runs (a full pipe would stall it).
    log = workdir / "prometheus.log"
    with log.open("wb") as sink:
        process = await anyio.open_process(command, stdout=subprocess.DEVNULL, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            with anyio.fail_after(15):
                while True:
                    if process.returncode is not None:
                        raise AssertionError(f"prometheus exited: {log.read_text()}")
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get(url + "/-/ready")).status_code == 200:
                            break
                    await anyio.sleep(0.1)
        yield url
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(5):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()


async def query(http: httpx.AsyncClient, prometheus: str, promql: str) -> list[dict[str, Any]]:
    """The instant vector ``promql`` evaluates to now (``/api/v1/query``)."""
    answer = await http.get(prometheus + "/api/v1/query", params={"query": promql})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["status"] == "success", body
    assert body["data"]["resultType"] == "vector", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def values_by(
    http: httpx.AsyncClient, prometheus: str, promql: str, label: str
) -> dict[str, float]:
    """``promql``'s samples as ``{value of label: sample value}``."""
    return {
        sample["metric"].get(label, ""): float(sample["value"][1])
        for sample in await query(http, prometheus, promql)
    }


async def drive_calls(http: httpx.AsyncClient, controller: str) -> None:
    """``PLAIN_CALLS`` whole answers and ``STREAMED_CALLS`` streams through the controller."""
    for streamed in [False] * PLAIN_CALLS + [True] * STREAMED_CALLS:
        body = {"model": DEFAULT_MODEL_NAME, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8, "ignore_eos": True, "stream": streamed}  # fmt: skip
        answer = await http.post(controller + "/v1/chat/completions", json=body)
        assert answer.status_code == 200, answer.text


@contextlib.asynccontextmanager
async def driven_stack() -> AsyncIterator[tuple[httpx.AsyncClient, str, str]]:
    """An emulator and a controller in front of it, once the controller is ready (within 10 s)
    and :func:`drive_calls` went through it; yields a client, the controller's URL and the
    emulator's."""
    async with serve_engine(EmulatorConfig()) as engine:
        config = ControllerConfig(
            port=0, backends=(BackendSpec(engine.base_url, kind="emulator"),), scrape_interval_s=0.2
        )
        async with serve_controller(config) as controller, httpx.AsyncClient(timeout=20) as http:
            with anyio.fail_after(10):
                while (await http.get(controller + "/readyz")).status_code != 200:  # noqa: ASYNC110 - over HTTP, no event to await
                    await anyio.sleep(0.05)
            await drive_calls(http, controller)
            yield http, controller, engine.base_url


async def test_prometheus_scrapes_the_controller_and_the_emulator(tmp_path: Path) -> None:
    tools = prometheus_tools()
    async with driven_stack() as (http, controller, engine):
        calls = PLAIN_CALLS + STREAMED_CALLS
        scrape = scrape_config(
            controller.removeprefix("http://"),
            engine.removeprefix("http://").rstrip("/"),
            PROMETHEUS_DIR / "alerts.rules.yml",
        )
        async with prometheus_server(tools.prometheus, scrape, tmp_path) as prometheus:
            # Until both targets were scraped after the calls (the first scrape comes within
            # one 0.5 s interval) and every rule group ran once.
            with anyio.fail_after(20):
                while True:
                    up = await values_by(http, prometheus, "up", "job")
                    e2e = await values_by(
                        http, prometheus,
                        "sum by (job) (agentrt_controller_call_e2e_seconds_count)", "job",
                    )  # fmt: skip
                    groups = await rule_groups(http, prometheus)
                    evaluated = all(
                        rule["lastEvaluation"] > "0001-01-01T00:00:00Z"
                        for group in groups
                        for rule in group["rules"]
                    )
                    if len(up) == 2 and e2e and evaluated:
                        break
                    await anyio.sleep(0.2)
            assert up == {CONTROLLER_JOB: 1.0, ENGINES_JOB: 1.0}
            assert e2e == {CONTROLLER_JOB: float(calls)}
            ttft = await values_by(
                http, prometheus,
                "sum(agentrt_controller_time_to_first_token_seconds_count)", "job",
            )  # fmt: skip
            assert ttft == {"": float(STREAMED_CALLS)}
            build = await values_by(http, prometheus, "agentrt_build_info", "component")
            assert build == {"controller": 1.0, "emulator": 1.0}
            jobs = await values_by(http, prometheus, "agentrt_build_info", "job")
            assert jobs == {CONTROLLER_JOB: 1.0, ENGINES_JOB: 1.0}
            per_token = await values_by(
                http, prometheus, "vllm:time_per_output_token_seconds_count", "job"
            )
            assert per_token == {ENGINES_JOB: float(calls)}
            running = await values_by(http, prometheus, "vllm:num_requests_running", "job")
            assert running == {ENGINES_JOB: 0.0}
            backend = await values_by(http, prometheus, "agentrt_controller_backend_up", "backend")
            assert list(backend.values()) == [1.0]
            for group in groups:
                for rule in group["rules"]:
                    assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
            alerts = await query(http, prometheus, "ALERTS")
            assert alerts == [], "a healthy stack raised alerts"
            await check_dashboard_queries(http, prometheus)


async def check_dashboard_queries(http: httpx.AsyncClient, prometheus: str) -> None:
    """Every query of the Grafana dashboard, its variables filled in as Grafana would, is
    PromQL this Prometheus evaluates; the panels over gauges of both servers show data."""
    from tests.ops.test_prometheus_rules import dashboard_expressions

    for where, expression in dashboard_expressions().items():
        promql = expression.replace("$__rate_interval", "2s").replace("$instance", ".*")
        answer = await http.get(prometheus + "/api/v1/query", params={"query": promql})
        assert answer.status_code == 200, (where, answer.text)
    for gauge in ("agentrt_controller_live_programs", "vllm:num_requests_running"):
        assert await query(http, prometheus, f"sum by (instance) ({gauge})"), gauge


async def rule_groups(http: httpx.AsyncClient, prometheus: str) -> list[dict[str, Any]]:
    """The rule groups Prometheus loaded, with each rule's health and last evaluation."""
    answer = await http.get(prometheus + "/api/v1/rules")
    assert answer.status_code == 200, answer.text
    groups: list[dict[str, Any]] = answer.json()["data"]["groups"]
    assert groups, "prometheus loaded no alert rules"
    return groups
