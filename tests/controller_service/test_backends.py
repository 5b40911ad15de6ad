"""The backend seam: specs, body encoding, metric parsing, the vLLM HTTP backend."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator

import pytest

from agentrt.errors import ConfigError, EndpointUnavailable
from agentrt_controller.backends import (
    BackendRequest,
    BackendSpec,
    BackendUnavailable,
    build_backend,
)
from agentrt_controller.backends.http import VllmBackend, encode_body
from agentrt_controller.backends.prometheus_text import sum_samples
from agentrt_controller.backends.transport import HttpPool

from .conftest import fake_backends
from .fake_openai import FakeState

pytestmark = pytest.mark.timeout(30)


@contextlib.asynccontextmanager
async def pool() -> AsyncIterator[HttpPool]:
    http = HttpPool.create()
    try:
        yield http
    finally:
        await http.aclose()


@pytest.mark.parametrize(
    ("text", "url", "kind", "backend_id", "priority"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000", "vllm", "127.0.0.1:8000", False),
        ("http://h:9/v1/,priority=on,id=e0", "http://h:9", "vllm", "e0", True),
        ("https://h,kind=openai", "https://h", "openai", "h:443", False),
    ],
)
def test_backend_spec_parses(
    text: str, url: str, kind: str, backend_id: str, priority: bool
) -> None:
    spec = BackendSpec.parse(text)
    assert (spec.url, spec.kind, spec.backend_id, spec.priority) == (
        url,
        kind,
        backend_id,
        priority,
    )


@pytest.mark.parametrize(
    "text", ["ftp://h", "http://", "http://h,priority=maybe", "http://h,novalue"]
)
def test_backend_spec_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        BackendSpec.parse(text)


def test_unknown_kind_and_option_are_config_errors() -> None:
    http = HttpPool.create()
    with pytest.raises(ConfigError, match="unknown backend kind"):
        build_backend(BackendSpec.parse("http://h,kind=tgi"), http)
    with pytest.raises(ConfigError, match="unknown options"):
        build_backend(BackendSpec.parse("http://h,colour=red"), http)


def _request(raw: bytes, **kwargs: object) -> BackendRequest:
    return BackendRequest("/v1/chat/completions", raw, json.loads(raw), False, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw",
    [b'{"model": "m"}', b'{"model":"m","messages":[{"content":"}"}]}  \n', b"{}", b'{ "a": {} }'],
)
def test_priority_is_spliced_without_reserialising(raw: bytes) -> None:
    out = encode_body(_request(raw), {"priority": 3})
    assert json.loads(out) == {**json.loads(raw), "priority": 3}
    assert out.startswith(raw.rstrip()[:-1].rstrip())  # the client's bytes are kept as sent


def test_existing_priority_and_stream_usage_are_merged() -> None:
    raw = b'{"model": "m", "priority": 9, "stream_options": {"x": 1}}'
    out = json.loads(encode_body(_request(raw, add_stream_usage=True), {"priority": 2}))
    assert out["priority"] == 2
    assert out["stream_options"] == {"x": 1, "include_usage": True}
    assert encode_body(_request(raw), {}) == raw


_TRICKY_BODIES = [
    b'{"model": "m", "stream": true}',
    b'{"model":"m","stream":true,"stream_options":{"include_usage":false}}',
    b'{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":true,"x":[1]}}',
    b'{"model":"m","stream":true,"stream_options":null}',
    b'{"model":"m","stream":true,"stream_options":"yes"}',
    b'{"model":"m","stream":true,"stream_options":[{"include_usage":true}]}',
    b' \n{ "model" : "m" ,\t"messages" : [ {"content": "} {"} ] ,"stream":true } \r\n',
    b"{}",
    b"{ \n }",
    '{"model":"m","messages":[{"content":"h\u00e9llo \\ud83d\\ude00 \u2603"}]}'.encode(),
    b'{"model":"m","messages":[{"content":"lone \\ud800 surrogate, \\" quote"}]}',
    b'\xef\xbb\xbf{"model": "m"}',  # a UTF-8 byte-order mark (json.loads reads it)
    '{"model": "m", "stream": true}'.encode("utf-16-le"),
    '{"model": "m", "stream": true}'.encode("utf-32"),
]


@pytest.mark.parametrize("raw", _TRICKY_BODIES)
@pytest.mark.parametrize("extra", [{}, {"priority": 3}])
def test_stream_usage_is_added_with_the_same_json_as_a_full_encode(
    raw: bytes, extra: dict[str, object]
) -> None:
    """``stream_options.include_usage`` is spliced in when the body has no ``stream_options``
    (the client's bytes kept as sent) and merged by encoding again otherwise; parsed, the
    result is the body with the fields set either way."""
    body = json.loads(raw)
    out = encode_body(_request(raw, add_stream_usage=True), extra)
    options = body.get("stream_options")
    expected = {
        **body,
        **extra,
        "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True},
    }
    assert json.loads(out) == expected
    assert list(json.loads(out)) == list(expected)  # the keys in the same order
    utf8 = raw.lstrip().startswith(b"{") and b"\x00" not in raw[:4]
    if "stream_options" not in body and utf8:
        assert out.startswith(raw.rstrip()[:-1].rstrip())  # spliced: the prompt not re-encoded


def test_prometheus_text_sums_series_and_skips_garbage() -> None:
    text = "\n".join(
        [
            "# HELP vllm:num_requests_waiting x",
            'vllm:num_requests_waiting{model_name="a"} 3',
            'vllm:num_requests_waiting{model_name="b",engine="1"} 2.0 1700000000',
            "vllm:num_requests_running NaN",
            "vllm:kv_cache_usage_perc not-a-number",
            "garbage line without value",
            "{broken",
            "\x00\xff",
        ]
    )
    found = sum_samples(text, ["vllm:num_requests_waiting", "vllm:num_requests_running"])
    assert found == {"vllm:num_requests_waiting": 5.0}


def test_vllm_load_treats_out_of_range_values_as_unknown() -> None:
    backend = VllmBackend("b", "http://h", HttpPool.create())
    load = backend.load_from_metrics(
        "vllm:kv_cache_usage_perc 7\nvllm:num_requests_waiting -1\nvllm:num_requests_running 4\n"
    )
    assert (load.kv_cache_usage, load.num_waiting, load.num_running) == (None, None, 4)


def test_the_emulator_reports_its_batch_size_and_vllm_does_not() -> None:
    from agentrt_controller.backends.emulator import EmulatorBackend
    from agentrt_emulator.core.engine import EngineCore
    from agentrt_emulator.core.profiles import get_profile
    from agentrt_emulator.core.types import EngineConfig
    from agentrt_emulator.server.metrics import ServerMetrics

    core = EngineCore(EngineConfig(max_num_seqs=2), get_profile("a100-llama3-8b"))
    text = ServerMetrics("m", max_num_seqs=2).render(core.stats())
    emulator = EmulatorBackend("e", "http://h", HttpPool.create())
    assert emulator.load_from_metrics(text).max_num_seqs == 2
    vllm = VllmBackend("v", "http://h", HttpPool.create())
    assert vllm.load_from_metrics(text).max_num_seqs == 2  # the emulator as kind=vllm
    real_vllm = "vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n"
    assert vllm.load_from_metrics(real_vllm).max_num_seqs is None  # vLLM publishes none
    assert "agentrt_engine_max_num_seqs" not in ServerMetrics("m").render(core.stats())


def test_the_emulator_reports_its_time_scale_and_vllm_does_not() -> None:
    from agentrt_controller.backends.emulator import DetectedBackend, EmulatorBackend
    from agentrt_emulator.core.engine import EngineCore
    from agentrt_emulator.core.profiles import get_profile
    from agentrt_emulator.core.types import EngineConfig
    from agentrt_emulator.server.metrics import ServerMetrics

    core = EngineCore(EngineConfig(), get_profile("a100-llama3-8b"))
    fast = ServerMetrics("m", time_scale=10.0).render(core.stats())
    for kind in (EmulatorBackend, DetectedBackend):  # kind=emulator, and no kind given
        assert kind("e", "http://h", HttpPool.create()).load_from_metrics(fast).time_scale == 10.0
    real_time = ServerMetrics("m").render(core.stats())
    assert sum_samples(real_time, ["agentrt_engine_time_scale"]) == {
        "agentrt_engine_time_scale": 1.0
    }
    real_vllm = "vllm:num_requests_running 3\nvllm:num_requests_waiting 0\n"
    emulator = EmulatorBackend("e", "http://h", HttpPool.create())
    assert emulator.load_from_metrics(real_vllm).time_scale is None
    assert emulator.load_from_metrics("agentrt_engine_time_scale 0\n").time_scale is None


@pytest.mark.anyio
async def test_vllm_backend_over_http() -> None:
    state = FakeState(metrics_text="vllm:num_requests_waiting 4\nvllm:kv_cache_usage_perc 0.25\n")
    async with fake_backends(state) as (url,), pool() as http:
        backend = build_backend(BackendSpec(url, priority=True), http)
        assert await backend.health()
        load = await backend.scrape()
        assert (load.num_waiting, load.kv_cache_usage, load.num_running) == (4, 0.25, None)
        assert [m["id"] for m in await backend.models()] == ["tiny"]
        raw = json.dumps({"model": "tiny", "messages": []}).encode()
        response = await backend.send(_request(raw, priority=5))
        assert response.status_code == 200
        assert json.loads(await response.aread())["usage"]["completion_tokens"] == 5
    assert state.requests[0]["priority"] == 5


@pytest.mark.anyio
async def test_garbage_metrics_mean_unknown_load() -> None:
    state = FakeState(metrics_text="<html>not metrics</html>")
    async with fake_backends(state) as (url,), pool() as http:
        load = await build_backend(BackendSpec(url), http).scrape()
    assert load.num_waiting is None and load.num_running is None


@pytest.mark.anyio
async def test_unreachable_backend_raises_our_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with pool() as http:
        backend = build_backend(BackendSpec(f"http://127.0.0.1:{port}"), http)
        assert not await backend.health()
        with pytest.raises(BackendUnavailable) as caught:
            await backend.send(_request(b'{"model": "m"}'))
        with pytest.raises(EndpointUnavailable):
            await backend.scrape()
    assert caught.value.connect_failed
