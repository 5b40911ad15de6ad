"""``benchmarks/_call_counts.py``: layers by source path, calls per request from two real
cProfile runs, the table."""

from __future__ import annotations

import cProfile
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(30)

counts = load_benchmark("_call_counts")


@pytest.mark.parametrize(
    ("filename", "layer"),
    [
        ("/x/site-packages/uvicorn/protocols/http/httptools_impl.py", "server"),
        ("/repo/controller/agentrt_controller/service/http/server.py", "server"),
        ("/repo/controller/agentrt_controller/service/http/access_log.py", "access log"),
        ("/repo/controller/agentrt_controller/service/http/proxy.py", "endpoint"),
        ("/repo/controller/agentrt_controller/backends/http.py", "backend leg"),
        ("/repo/agentrt/agentrt/fasthttp.py", "backend leg"),
        ("/x/site-packages/anyio/_backends/_asyncio.py", "anyio"),
        ("/repo/controller/agentrt_controller/service/http/direct.py", "server"),
        ("/repo/controller/agentrt_controller/service/telemetry/prometheus.py", "metrics"),
        ("/repo/controller/agentrt_controller/service/core/facade.py", "core"),
        ("/repo/controller/agentrt_controller/routing/prefix_index.py", "policies"),
        ("/usr/lib/python3.11/asyncio/tasks.py", "asyncio"),
        ("~", "C builtins"),
        ("/somewhere/else.py", "other"),
    ],
)
def test_a_function_belongs_to_the_layer_its_file_names(filename: str, layer: str) -> None:
    assert counts.layer_of(filename).startswith(layer)


def _requests(n: int) -> None:
    for _ in range(n):
        sorted([3, 1, 2])  # one builtin call per "request", plus the loop's own


def test_calls_per_request_cancel_what_both_runs_share(tmp_path: Path) -> None:
    outs = []
    for n in (100, 300):
        profiler = cProfile.Profile()
        profiler.runcall(_requests, n)
        out = tmp_path / f"{n}.prof"
        profiler.dump_stats(out)
        outs.append(counts.calls_by_layer(str(out)))
    per_request = counts.per_request(outs[0], outs[1], 100, 300)
    assert per_request[counts.BUILTINS] == pytest.approx(1.0)  # sorted, once per request
    table = counts.markdown({"before": per_request, "after": per_request})
    assert "| C builtins and methods (all layers) | 1 | 1 |" in table
    assert table.splitlines()[-1].startswith("| **total** |")


def test_bad_inputs_are_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="more requests"):
        counts.per_request({}, {}, 10, 10)
    with pytest.raises(FileNotFoundError, match="no profile"):
        counts.calls_by_layer(str(tmp_path / "missing.prof"))


def test_count_connections_below_one_is_refused_by_name() -> None:
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "controller_overhead.py"
    done = subprocess.run(
        [sys.executable, str(script), "--count-calls", "--count-connections", "0"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "--count-connections must be at least 1" in done.stderr
