"""Start and stop a real vLLM OpenAI server (CPU build) serving a tiny local model.

Standard library only: it runs under any Python >= 3.11 (the project's .venv, CI's shell) and
drives the vLLM venv's python (scripts/vllm/setup.sh) through subprocesses.

Command line:

    python scripts/vllm/server.py model             build (or reuse) the tiny model; print its dir
    python scripts/vllm/server.py start [--port P] [--max-num-seqs N] [--state FILE]
                                    [--scheduling-policy priority|fcfs] [--step-floor-ms MS]
                                    [--no-dev-endpoints] [--cpus LIST]
                                                    start, wait until healthy, print the base URL
                                                    (the server keeps running; state in FILE)
    python scripts/vllm/server.py stop [--state FILE]  stop the server started with `start`

Library (tests/real_vllm/conftest.py loads this file): `find_vllm_python`, `ensure_model`,
`start_server`, `stop_server`, `parse_metrics`, `scrape_metrics`, `metric_sum`,
`ServerOptions`, `RunningServer`.

Environment: AGENTRT_VLLM_PYTHON (the venv's python; default <repo>/.vllm-venv/bin/python when
setup.sh finished), AGENTRT_VLLM_SCRATCH (models, logs and vLLM's temp files; default
<repo>/.vllm-scratch). Facts about this vLLM build: docs/real-vllm.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BUILDER = HERE / "build_tiny_model.py"
DEFAULT_VENV = ROOT / ".vllm-venv"
STAMP_NAME = ".agentrt-vllm-installed"  # written by setup.sh when the install succeeded
SERVED_MODEL_NAME = "tiny-llama"
PLUGINS = HERE / "plugins"  # put on vLLM's PYTHONPATH
STEP_FLOOR_PROCESSOR = "agentrt_vllm_step_floor:StepTimeFloor"
CPU_BLOCK_SIZE = 128  # tokens per KV block: vLLM's CPU default (only full blocks are cached)


class VllmLaunchError(RuntimeError):
    """vLLM could not be found, the model not built, or the server did not become healthy.

    Test infrastructure, not part of agentrt's public API: it stays stdlib-only so that it can
    run outside the project's venv, hence not derived from agentrt.errors.
    """


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """How to start one vLLM server.

    port: TCP port on 127.0.0.1; None picks a free one.
    max_num_seqs: requests vLLM runs at once (its batch); the rest wait in its queue.
    kv_cache_bytes: bytes of KV cache (--kv-cache-memory-bytes); 64 MiB = 32,768 tokens here.
    scheduling_policy: "priority" (lower `priority` value runs first) or "fcfs".
    extra_args: appended to vLLM's command line as given.
    step_floor_ms: minimum duration of one engine step (ms), enforced by our logits processor
        (plugins/agentrt_vllm_step_floor.py): paces the tiny model like a real one so that
        vLLM's HTTP process keeps up on a small machine. 0 turns it off.
    dev_endpoints: sets VLLM_SERVER_DEV_MODE=1, which adds /pause?mode=keep, /resume,
        /reset_prefix_cache, /sleep, ... (tests use them to build exact queue states).
        For test servers only: anyone who can reach the port can pause the engine.
    startup_timeout_s: seconds to wait for /health before giving up (~25-30 s is usual).
    cpus: a CPU list in taskset syntax (e.g. "1" or "2-3"): every vLLM process (API server,
        engine core, worker) runs under `taskset -c CPUS` and the worker's OpenMP threads are
        bound there (VLLM_CPU_OMP_THREADS_BIND=CPUS), so vLLM's CPU does not come out of other
        processes' cores (benchmarks/real_vllm.py). None: no pinning (vLLM's own binding).
    """

    port: int | None = None
    max_num_seqs: int = 2
    kv_cache_bytes: int = 64 * 1024 * 1024
    scheduling_policy: str = "priority"
    served_model_name: str = SERVED_MODEL_NAME
    extra_args: tuple[str, ...] = ()
    step_floor_ms: float = 4.0
    dev_endpoints: bool = True
    startup_timeout_s: float = 240.0
    cpus: str | None = None


@dataclasses.dataclass(frozen=True)
class RunningServer:
    """A started vLLM server; `base_url` has no trailing slash and no /v1."""

    base_url: str  # e.g. "http://127.0.0.1:40123"
    port: int
    pid: int  # also its process-group id (started in a session of its own)
    model: str  # the served model name to put in requests
    model_dir: str
    max_num_seqs: int
    step_floor_ms: float  # minimum engine step duration (ms); 0 = none
    block_size: int  # tokens per KV block (prefix-cache granularity)
    run_dir: str  # TMPDIR, VLLM_CACHE_ROOT and server.log live here
    startup_s: float  # seconds from spawn to a healthy /health

    @property
    def openai_base_url(self) -> str:
        """Base URL for the `openai` client (…/v1)."""
        return self.base_url + "/v1"

    @property
    def metrics_url(self) -> str:
        return self.base_url + "/metrics"

    @property
    def log_path(self) -> str:
        return str(Path(self.run_dir) / "server.log")

    def log_tail(self, lines: int = 40) -> str:
        return _tail(Path(self.log_path), lines)


def scratch_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("AGENTRT_VLLM_SCRATCH") or ROOT / ".vllm-scratch")


def find_vllm_python(env: Mapping[str, str] | None = None) -> Path | None:
    """The vLLM venv's python, or None when vLLM is not installed.

    AGENTRT_VLLM_PYTHON wins when set (it must exist); otherwise the default venv counts only
    once setup.sh has finished (its stamp file exists).
    """
    env = os.environ if env is None else env
    given = env.get("AGENTRT_VLLM_PYTHON")
    if given:
        # absolute (not resolved: a venv's python is a symlink): vLLM starts in its run dir
        return Path(given).absolute() if Path(given).is_file() else None
    venv = Path(env.get("AGENTRT_VLLM_VENV") or DEFAULT_VENV)
    python = venv / "bin" / "python"
    if python.is_file() and (venv / STAMP_NAME).is_file():
        return python
    return None


def builder_key() -> str:
    """Cache key of the tiny model: a hash of the builder script (an edit rebuilds it)."""
    return hashlib.sha256(BUILDER.read_bytes()).hexdigest()[:16]


def ensure_model(python: Path, scratch: Path | None = None) -> Path:
    """Build the tiny model once per builder version; return its directory.

    Concurrent callers (several pytest sessions) serialise on a file lock; the builder writes
    into a staging directory and renames it, so a half-built model is never used.
    """
    models = (scratch or scratch_dir()) / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / f"tiny-llama-{builder_key()}"
    with open(models / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
            return target
        done = subprocess.run(
            [str(python), str(BUILDER), str(target)],
            capture_output=True,
            text=True,
            env=_child_env(models, os.environ),
            check=False,
        )
        if done.returncode != 0:
            raise VllmLaunchError(
                f"building the tiny model failed (exit {done.returncode}):\n"
                + "\n".join((done.stdout + done.stderr).splitlines()[-30:])
            )
        for stale in models.glob("tiny-llama-*"):
            if stale != target and stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
    return target


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_command(python: Path, model_dir: Path, port: int, options: ServerOptions) -> list[str]:
    """vLLM's command line. Why each flag: docs/real-vllm.md."""
    taskset = ["taskset", "-c", options.cpus] if options.cpus is not None else []
    return [
        *taskset,
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        options.served_model_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--kv-cache-memory-bytes",
        str(options.kv_cache_bytes),
        "--enable-prefix-caching",
        "--scheduling-policy",
        options.scheduling_policy,
        "--max-num-seqs",
        str(options.max_num_seqs),
        "--enable-prompt-tokens-details",
        *(["--logits-processors", STEP_FLOOR_PROCESSOR] if options.step_floor_ms > 0 else []),
        *options.extra_args,
    ]


def start_server(
    python: Path,
    model_dir: Path,
    options: ServerOptions = ServerOptions(),  # frozen dataclass: a safe shared default
    scratch: Path | None = None,
) -> RunningServer:
    """Spawn vLLM in a process group of its own and wait until GET /health answers 200.

    Raises VllmLaunchError (with the log's tail) when it exits early or is not healthy within
    options.startup_timeout_s; the process group is killed first.
    """
    runs = (scratch or scratch_dir()) / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="vllm-", dir=runs))
    port = options.port or free_port()
    if options.cpus is not None and shutil.which("taskset") is None:
        raise VllmLaunchError("ServerOptions.cpus needs taskset (util-linux) on PATH")
    log_path = run_dir / "server.log"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            server_command(python, model_dir, port, options),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_child_env(run_dir, os.environ, options),
            cwd=run_dir,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, base_url, log_path, options.startup_timeout_s)
    except BaseException:
        _kill_group(proc.pid, grace_s=5.0)
        proc.wait()
        raise
    # The Popen object is dropped on purpose: the server is stopped by its process-group id,
    # also from another process (`server.py stop`). Mark it done so no ResourceWarning fires.
    proc.returncode = 0
    return RunningServer(
        base_url=base_url,
        port=port,
        pid=proc.pid,
        model=options.served_model_name,
        model_dir=str(model_dir),
        max_num_seqs=options.max_num_seqs,
        step_floor_ms=options.step_floor_ms,
        block_size=CPU_BLOCK_SIZE,
        run_dir=str(run_dir),
        startup_s=time.monotonic() - started,
    )


def stop_server(server: RunningServer, keep_logs: bool = False, grace_s: float = 20.0) -> None:
    """Stop the server's whole process group (API server, engine core, workers).

    SIGTERM first, SIGKILL after grace_s seconds. Removes the run directory unless keep_logs.
    """
    _stop_group(server.pid, Path(server.run_dir), keep_logs, grace_s)


def parse_metrics(text: str) -> dict[str, float]:
    """Every `vllm:` sample of a Prometheus text page: {"name{labels}": value}.

    Labels are kept as vLLM prints them (sorted by name), e.g.
    'vllm:num_requests_running{engine="0",model_name="tiny-llama"}'. Use `metric_sum` to add
    up all series of one metric name.
    """
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        key, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            samples[key] = float(value)
    return samples


def scrape_metrics(base_url: str, timeout_s: float = 10.0) -> dict[str, float]:
    """GET {base_url}/metrics (blocking) and parse it with `parse_metrics`."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=timeout_s) as response:
        return parse_metrics(response.read().decode("utf-8"))


def metric_sum(samples: Mapping[str, float], name: str) -> float | None:
    """Sum of every series of metric `name` (any labels); None when vLLM exposes none."""
    values = [v for k, v in samples.items() if k == name or k.startswith(name + "{")]
    return sum(values) if values else None


# ---------------------------------------------------------------------------------------------


def _child_env(
    run_dir: Path, base: Mapping[str, str], options: ServerOptions | None = None
) -> dict[str, str]:
    env = dict(base)
    env.pop("VLLM_SERVER_DEV_MODE", None)
    if options is not None:
        if options.dev_endpoints:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        env["AGENTRT_VLLM_STEP_FLOOR_MS"] = str(options.step_floor_ms)
        if options.cpus is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = options.cpus
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))
    tmp = run_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env.update(
        TMPDIR=str(tmp),
        VLLM_CACHE_ROOT=str(run_dir / "cache"),
        # Everything stays on this machine: no hub, no usage reports, loopback only.
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(run_dir / "cache" / "hf"),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_HOST_IP="127.0.0.1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    # An empty VLLM_CPU_KVCACHE_SPACE crashes this build; the size comes from the flag instead.
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    return env


def _stop_group(pgid: int, run_dir: Path, keep_logs: bool, grace_s: float) -> None:
    _kill_group(pgid, grace_s=grace_s)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, 0)
    if keep_logs:
        shutil.rmtree(run_dir / "tmp", ignore_errors=True)
        shutil.rmtree(run_dir / "cache", ignore_errors=True)
    else:
        shutil.rmtree(run_dir, ignore_errors=True)


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def _wait_healthy(
    proc: subprocess.Popen[bytes], base_url: str, log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        code = proc.poll()
        if code is not None:
            raise VllmLaunchError(
                f"vLLM exited with code {code} before becoming healthy; log {log_path}:\n"
                + _tail(log_path, 40)
            )
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=2.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise VllmLaunchError(
                f"vLLM was not healthy at {base_url}/health after {timeout_s:.0f} s; "
                f"log {log_path}:\n" + _tail(log_path, 40)
            )
        time.sleep(0.5)


def _kill_group(pgid: int, grace_s: float) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        # Reap the leader if it is our child, so the group can disappear.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="server.py", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("model", help="build (or reuse) the tiny model and print its directory")
    start = sub.add_parser("start", help="start a server in the background; print its URL")
    start.add_argument("--port", type=int, default=None)
    start.add_argument("--max-num-seqs", type=int, default=ServerOptions.max_num_seqs)
    start.add_argument("--scheduling-policy", default="priority", choices=["priority", "fcfs"])
    start.add_argument("--step-floor-ms", type=float, default=ServerOptions.step_floor_ms)
    start.add_argument(
        "--no-dev-endpoints",
        action="store_true",
        help="do not expose vLLM's dev endpoints (/pause, /resume, /reset_prefix_cache, ...)",
    )
    start.add_argument(
        "--cpus", default=None, help="run every vLLM process on these CPUs (taskset -c LIST)"
    )
    start.add_argument("--state", default=str(scratch_dir() / "server.json"))
    stop = sub.add_parser("stop", help="stop the server recorded in --state")
    stop.add_argument("--state", default=str(scratch_dir() / "server.json"))
    args = parser.parse_args(argv)

    if args.cmd == "stop":
        state = Path(args.state)
        if not state.is_file():
            print(f"no server recorded in {state}", file=sys.stderr)
            return 1
        recorded = json.loads(state.read_text())
        _stop_group(int(recorded["pid"]), Path(recorded["run_dir"]), False, 20.0)
        state.unlink()
        return 0

    python = find_vllm_python()
    if python is None:
        print("vLLM is not installed: run scripts/vllm/setup.sh", file=sys.stderr)
        return 1
    try:
        model_dir = ensure_model(python)
        if args.cmd == "model":
            print(model_dir)
            return 0
        options = ServerOptions(
            port=args.port,
            max_num_seqs=args.max_num_seqs,
            scheduling_policy=args.scheduling_policy,
            dev_endpoints=not args.no_dev_endpoints,
            step_floor_ms=args.step_floor_ms,
            cpus=args.cpus,
        )
        server = start_server(python, model_dir, options)
    except VllmLaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    Path(args.state).parent.mkdir(parents=True, exist_ok=True)
    Path(args.state).write_text(json.dumps(dataclasses.asdict(server), indent=2) + "\n")
    print(f"vLLM healthy after {server.startup_s:.1f} s; log {server.log_path}", file=sys.stderr)
    print(server.base_url)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
