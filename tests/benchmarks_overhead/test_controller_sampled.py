"""benchmarks/controller_sampled.py: py-spy's raw samples by layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.timeout(30)

sampled = load_benchmark("controller_sampled")

_TOP = "_run_module_as_main (<frozen runpy>:198);Server.run (uvicorn/server.py:86)"
_CALL = _TOP + ";DirectCalls.__call__ (agentrt_controller/service/http/direct.py:98)"
RAW = [
    # a policy's own line, and the interpreter's C under it: both the policy's
    _CALL + ";Dispatcher.admit (agentrt_controller/scheduling/dispatcher.py:242) 5",
    _CALL + ";ProcessTable.ensure (agentrt_controller/process_table.py:270);"
    "Py_DECREF (object.h:537) 3",
    # the collector, wherever it was triggered
    _CALL + ";parse_call (agentrt_controller/service/http/incoming.py:281);"
    "gc_collect_main (libpython3.11.so.1.0) 4",
    # a system call, the parser's C, the event loop's C, orjson
    _CALL + ";DirectExchange._write_last (agentrt_serving/direct.py:300);write (libc.so.6) 6",
    _TOP + ";data_received (uvicorn/protocols/http/httptools_impl.py:1);"
    "llhttp_execute (llhttp.c:1) 2",
    _TOP + ";run_forever (loop.c:35410) 1",
    _CALL + ";_loads (agentrt_controller/service/core/charging.py:9);"
    "loads (orjson/orjson.cpython-311-x86_64-linux-gnu.so) 1",
    _CALL + ";AccessLog._line (agentrt_controller/service/http/access_log.py:262) 2",
    "",
]


def test_samples_go_to_their_layer_and_project_frames_count_inclusively() -> None:
    total, layers, inclusive = sampled.classify(RAW)
    assert total == 24
    assert layers == {
        "policies": 8, "cyclic garbage collector": 4, "kernel (system calls)": 6,
        "HTTP parser (httptools C)": 2, "event loop (uvloop C)": 1, "JSON (orjson)": 1,
        "access log": 2,
    }  # fmt: skip
    assert inclusive["DirectCalls.__call__ (agentrt_controller/service/http/direct.py)"] == 21
    assert inclusive["Dispatcher.admit (agentrt_controller/scheduling/dispatcher.py)"] == 5


def test_the_report_leaves_system_calls_out_of_the_layer_shares(tmp_path: Path) -> None:
    raw = tmp_path / "ctl.raw"
    raw.write_text("\n".join(RAW))
    text = sampled.report([str(raw)])
    assert text.startswith("24 samples; 6 in system calls")
    assert " 44.4 %  policies" in text  # 8 of the 18 samples outside system calls
