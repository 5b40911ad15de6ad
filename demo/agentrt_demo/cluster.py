"""The demo's servers: emulated engines and a controller, each in a child process.

Everything started here is stopped when its ``async with`` block exits — normally, on an error
or on Ctrl-C: engines get their stdin closed and SIGTERM, then SIGKILL after a grace period;
the controller's server task ends with the block. Engines also exit by themselves when this
process dies (their stdin closes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
from anyio.abc import Process

from agentrt.errors import AgentrtError
from agentrt_demo.settings import DemoSettings

__all__ = [
    "ControllerSetup",
    "CpuTimes",
    "DemoError",
    "EngineMetrics",
    "RunningController",
    "backend_kinds",
    "controller_setup",
    "cpu_times",
    "retention_decisions",
    "run_controller",
    "run_engines",
    "scrape_engines",
    "since",
]

_STARTUP_TIMEOUT_S = 60.0
_STOP_GRACE_S = 5.0


class DemoError(AgentrtError):
    """The demo could not start or run its servers."""


# ------------------------------------------------------------------------------- engines
@asynccontextmanager
async def run_engines(
    settings: DemoSettings,
    policies: Mapping[str, Literal["fcfs", "priority"]],
    log_dir: Path,
) -> AsyncIterator[dict[str, list[str]]]:
    """Start ``settings.engines`` fresh engines per entry of ``policies`` (label → engine
    scheduling policy), all at once, in child processes; yields their base URLs by label.
    With ``settings.models``, engine ``i`` of each group serves ``models[i % len(models)]``.
    Engine ``i`` of group ``label`` logs to ``log_dir / f"engine-{label}-{i}.log"``.

    Raises :class:`DemoError` when one does not start within 60 s.
    """
    commands: list[tuple[str, list[str], Path]] = []
    for label, policy in policies.items():
        options: dict[str, object] = {
            "time_scale": settings.time_scale,
            "seed": settings.seed,
            "max_num_seqs": settings.max_num_seqs,
            "num_gpu_blocks": settings.num_gpu_blocks,
            "scheduling_policy": policy,
        }
        for i in range(settings.engines):
            if settings.models:  # one engine per model in turn
                options["model_name"] = settings.models[i % len(settings.models)]
            command = [sys.executable, "-m", "agentrt_demo.engine_proc", json.dumps(options)]
            commands.append((label, command, log_dir / f"engine-{label}-{i}.log"))
    async with _children([(c, log) for _, c, log in commands], "engines") as found:
        urls: dict[str, list[str]] = {label: [] for label in policies}
        for (label, _, _), (url, _) in zip(commands, found, strict=True):
            urls[label].append(url)
        yield urls


@asynccontextmanager
async def _children(
    commands: Sequence[tuple[list[str], Path]], what: str
) -> AsyncIterator[list[tuple[str, int]]]:
    """Start the child processes (all at once; each prints ``READY <url>``), yield their
    URLs and process ids in order, stop them all on exit (see :func:`_stop_all`)."""
    processes: list[Process] = []
    try:
        for command, log in commands:
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("wb") as log_file:  # the child keeps its own descriptor
                processes.append(
                    await anyio.open_process(
                        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file
                    )
                )
        urls = [""] * len(processes)

        async def ready(i: int) -> None:
            urls[i] = await _read_ready(processes[i], commands[i][1])

        try:
            with anyio.fail_after(_STARTUP_TIMEOUT_S):
                async with anyio.create_task_group() as group:
                    for i in range(len(processes)):
                        group.start_soon(ready, i)
        except TimeoutError as exc:
            raise DemoError(f"the {what} did not start within {_STARTUP_TIMEOUT_S:.0f} s") from exc
        yield [(url, process.pid) for url, process in zip(urls, processes, strict=True)]
    finally:
        with anyio.CancelScope(shield=True):
            await _stop_all(processes)


async def _read_ready(process: Process, log: Path) -> str:
    assert process.stdout is not None
    buffer = b""
    async for chunk in process.stdout:
        buffer += chunk
        line, newline, _ = buffer.partition(b"\n")
        if newline:
            text = line.decode(errors="replace").strip()
            if text.startswith("READY "):
                return text.split(" ", 1)[1]
            break
    path = anyio.Path(log)
    detail = (await path.read_text(errors="replace")).strip()[-500:] if await path.exists() else ""
    raise DemoError(f"a server failed to start: {detail or 'no output'} (log: {log})")


async def _stop_all(processes: Sequence[Process]) -> None:
    """Close every child's stdin (they stop by themselves: the controller writes its spans
    first), SIGTERM the ones still running after 5 s, SIGKILL them 3 s later."""
    for process in processes:
        if process.returncode is None and process.stdin is not None:
            await process.stdin.aclose()
    await _wait_all(processes, _STOP_GRACE_S)
    for process in processes:
        if process.returncode is None:
            process.terminate()
    await _wait_all(processes, 3.0)
    for process in processes:
        if process.returncode is None:
            process.kill()
    for process in processes:
        await process.wait()
        await process.aclose()


async def _wait_all(processes: Sequence[Process], timeout_s: float) -> None:
    with anyio.move_on_after(timeout_s):
        for process in processes:
            await process.wait()


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """Counters summed over a phase's engines (from their ``/metrics``)."""

    #: ``vllm:prefix_cache_queries_total`` / ``..._hits_total``: prompt tokens looked up / found.
    prefix_queries: float = 0.0
    prefix_hits: float = 0.0
    #: ``vllm:request_queue_time_seconds`` sum (model seconds) and count (requests): time the
    #: engines' requests waited in the engines' own queues.
    queue_time_s: float = 0.0
    requests: float = 0.0
    #: ``vllm:num_preemptions_total``.
    preemptions: float = 0.0

    @property
    def prefix_hit_rate(self) -> float | None:
        """Hits / queries in [0, 1]; None before any query."""
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else None


_METRICS = {
    "prefix_queries": "vllm:prefix_cache_queries_total",
    "prefix_hits": "vllm:prefix_cache_hits_total",
    "queue_time_s": "vllm:request_queue_time_seconds_sum",
    "requests": "vllm:request_queue_time_seconds_count",
    "preemptions": "vllm:num_preemptions_total",
}


async def scrape_engines(urls: Sequence[str]) -> EngineMetrics:
    """Sum the engines' counters; raises :class:`DemoError` when one cannot be scraped."""
    from agentrt_controller.backends.prometheus_text import sum_samples

    totals = dict.fromkeys(_METRICS, 0.0)
    async with httpx.AsyncClient(timeout=10.0) as http:
        for url in urls:
            try:
                response = await http.get(url + "/metrics")
                response.raise_for_status()
            except httpx.HTTPError as exc:
                raise DemoError(f"cannot read {url}/metrics: {exc}") from exc
            samples = sum_samples(response.text, _METRICS.values())
            for field, metric in _METRICS.items():
                totals[field] += samples.get(metric, 0.0)
    return EngineMetrics(**totals)


# ------------------------------------------------------------------------------- controller
@dataclass(frozen=True, slots=True)
class ControllerSetup:
    """How the demo's controller is configured."""

    #: Controller options (``agentrt_controller.service.load_config`` overrides): the engines'
    #: URLs (no ``kind``: the controller detects our emulator), a free port, and only the
    #: choices the user made; everything else is the controller's default.
    overrides: dict[str, Any]
    #: The resulting policy line (``agentrt_controller.defaults.describe``).
    policies: str
    #: The choices that differ from the controller's defaults, e.g. ``("policy=atlas",)``.
    chosen: tuple[str, ...]

    def describe(self) -> str:
        given = ", ".join(self.chosen)
        return self.policies + (
            f" (product defaults but {given})" if given else " (the product defaults)"
        )


def controller_setup(settings: DemoSettings, engine_urls: Sequence[str]) -> ControllerSetup:
    """The controller configuration for ``engine_urls``: what ``agentrt controller serve
    --backend URL ...`` runs, plus the choices ``settings`` makes (policy, router, retention,
    admission window, priority passthrough). Raises ``ConfigError`` for a choice the
    controller refuses (an unknown router, say)."""
    from agentrt_controller.service import load_config
    from agentrt_controller.service.core.policies import build_dispatcher

    priority = ",priority=on" if settings.priority else ""
    overrides: dict[str, Any] = {
        "port": 0,
        "backends": [f"{url}{priority}" for url in engine_urls],
        # the policies on the engines' model seconds (they run time_scale times faster)
        "time_scale": settings.time_scale,
    }
    retention = settings.retention
    chosen: dict[str, Any] = {
        "policy": settings.policy,
        "router": settings.router,
        "retention": None if retention is None else ("on" if retention else "off"),
        "admission_window": settings.window_choice(),
    }
    chosen = {key: value for key, value in chosen.items() if value is not None}
    overrides.update(chosen)
    config = load_config(env={}, overrides=overrides)
    # ConfigError: a cost table, router or policy this controller does not take.
    build_dispatcher(config, config.cost)
    policies = _policy_line(config)
    labels = [f"{key}={value}" for key, value in chosen.items()]
    if settings.priority:
        labels.append("priority=on")
    return ControllerSetup(overrides, policies, tuple(labels))


def _policy_line(config: Any) -> str:
    from agentrt_controller import defaults

    priorities = {b.priority for b in config.backends}
    priority = "on" if priorities == {True} else "off" if priorities == {False} else "mixed"
    return defaults.describe(
        policy=config.policy,
        admission_window=config.admission_window,
        router=config.router,
        retention=config.retention,
        priority=priority,
    )


async def backend_kinds(controller_url: str) -> list[str]:
    """The kind of each of the controller's backends (``emulator`` once detected), in its
    listing's order; raises :class:`DemoError` when the listing cannot be read."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        try:
            response = await http.get(controller_url + "/agentrt/v1/backends")
            response.raise_for_status()
            return [str(b.get("kind")) for b in response.json()["backends"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise DemoError(f"cannot read the controller's backend listing: {exc}") from exc


async def retention_decisions(controller_url: str) -> dict[str, int] | None:
    """The controller's retention decisions so far by kind (``{"retain": 57, ...}``: what its
    retention policy decided at tool waits, from ``GET /agentrt/v1/queues``); None when it
    reports none (retention off) or cannot be read: the summary then leaves them out."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        try:
            response = await http.get(controller_url + "/agentrt/v1/queues")
            response.raise_for_status()
            retention = response.json().get("retention")
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
    if not isinstance(retention, dict):
        return None
    policy = retention.get("policy")
    decisions = policy.get("decisions") if isinstance(policy, dict) else None
    if not isinstance(decisions, dict):
        decisions = retention.get("counts")
    if not isinstance(decisions, dict):
        return None
    return {str(k): int(v) for k, v in decisions.items() if isinstance(v, int | float)}


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """How a process used the CPUs so far (Linux ``/proc/PID/schedstat``), in seconds."""

    #: On a CPU.
    running_s: float
    #: Runnable but waiting for a CPU (other processes had them).
    waiting_s: float


def cpu_times(pid: int) -> CpuTimes | None:
    """The process's :class:`CpuTimes`; None where ``/proc/PID/schedstat`` cannot be read
    (not Linux, or the process is gone)."""
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text().split()
        return CpuTimes(int(fields[0]) / 1e9, int(fields[1]) / 1e9)
    except (OSError, ValueError, IndexError):
        return None


def since(before: CpuTimes | None, after: CpuTimes | None) -> CpuTimes | None:
    """The CPU use between two samples of one process; None when either is unknown."""
    if before is None or after is None:
        return None
    return CpuTimes(after.running_s - before.running_s, after.waiting_s - before.waiting_s)


@dataclass(frozen=True, slots=True)
class RunningController:
    """The demo's controller while it runs."""

    url: str
    pid: int

    def cpu_times(self) -> CpuTimes | None:
        return cpu_times(self.pid)


@asynccontextmanager
async def run_controller(
    setup: ControllerSetup, log_dir: Path, trace_out: Path | None
) -> AsyncIterator[RunningController]:
    """Run the controller in a child process; yields its URL and pid. Its spans are in
    ``trace_out`` (OTLP-JSON lines) once the block has exited."""
    options = {"overrides": setup.overrides, "trace_out": str(trace_out) if trace_out else None}
    command = [sys.executable, "-m", "agentrt_demo.controller_proc", json.dumps(options)]
    async with _children([(command, log_dir / "controller.log")], "controller") as started:
        ((url, pid),) = started
        async with httpx.AsyncClient(timeout=5.0) as http:
            # The first scrape marks the backends up; wait for it instead of racing it.
            with anyio.move_on_after(10.0):
                while True:
                    try:
                        if (await http.get(url + "/health")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    await anyio.sleep(0.05)
        yield RunningController(url, pid)
