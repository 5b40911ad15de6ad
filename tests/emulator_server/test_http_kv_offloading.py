"""The KV CPU tier over HTTP: ``--kv-offloading-size``, reload instead of recompute, metrics."""

from __future__ import annotations

from typing import Any

import pytest

from agentrt.cli import main

from .helpers import MODEL, make_config, metric, scrape, serving

pytestmark = pytest.mark.timeout(60)


def conversation(topic: str, rules: int) -> list[dict[str, Any]]:
    system = f"You are the {topic} agent. " + " ".join(f"rule{i} applies" for i in range(rules))
    return [{"role": "system", "content": system}, {"role": "user", "content": "Go."}]


@pytest.mark.anyio
@pytest.mark.parametrize(("size_gib", "reloads"), [(0.0, False), (1.0, True)])
async def test_evicted_prompt_comes_back_from_the_cpu_tier(size_gib: float, reloads: bool) -> None:
    # 40 GPU blocks (640 tokens): the second prompt evicts the first one's blocks
    config = make_config(num_gpu_blocks=40, kv_offloading_size=size_gib)
    async with serving(config) as (engine, openai):
        usages = []
        for messages in (conversation("planning", 80), conversation("coding", 150),
                         conversation("planning", 80)):  # fmt: skip
            completion = await openai.chat.completions.create(
                model=MODEL, messages=messages, max_tokens=4
            )
            assert completion.usage is not None
            usages.append(completion.usage)
        text = await scrape(engine)
    first, _, again = usages
    assert again.prompt_tokens == first.prompt_tokens
    assert again.prompt_tokens_details is not None
    cached = again.prompt_tokens_details.cached_tokens or 0
    if reloads:
        # vLLM counts tokens loaded by its KV connector as cached tokens
        assert cached > first.prompt_tokens // 2
        assert metric(text, "vllm:external_prefix_cache_hits_total") > 0
        assert metric(text, "vllm:external_prefix_cache_queries_total") >= 3 * 16
        assert metric(text, "agentrt_engine_kv_cpu_blocks") == 512  # 1 GiB / 2 MiB blocks
        assert 0 < metric(text, "agentrt_engine_kv_cpu_blocks_used") <= 512
        assert metric(text, "agentrt_engine_kv_offloaded_tokens_total") > 0
        assert metric(text, "agentrt_engine_kv_reload_model_seconds_total") > 0
    else:
        assert cached < first.prompt_tokens // 2
        assert metric(text, "vllm:external_prefix_cache_hits_total") == 0
        assert metric(text, "agentrt_engine_kv_cpu_blocks") == 0
        assert metric(text, "agentrt_engine_kv_offloaded_tokens_total") == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--kv-offloading-size", "129"], "exceeds the host memory"),  # A100 host: 128 GiB
        (["--kv-offloading-size", "-1"], "kv_offloading_size"),
        (["--kv-offloading-size", "1", "--no-enable-prefix-caching"], "prefix caching"),
    ],
)
def test_out_of_range_size_is_refused_at_start(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["engine", "serve", "--port", "0", *flags]) == 2
    assert message in capsys.readouterr().err


def test_backend_other_than_native_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["engine", "serve", "--kv-offloading-size", "1", "--kv-offloading-backend", "lmcache"])
    assert exited.value.code == 2
    assert "--kv-offloading-backend" in capsys.readouterr().err
