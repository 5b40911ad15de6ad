"""``agentrt engine serve`` as a user runs it: a real process answering the openai client."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import anyio
import httpx
import pytest
from openai import AsyncOpenAI

from agentrt.cli import main

from .helpers import MODEL

pytestmark = pytest.mark.timeout(60)


def test_serve_help_lists_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["engine", "serve", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--host", "--port", "--profile", "--time-scale", "--max-num-seqs",
                 "--max-num-batched-tokens", "--num-gpu-blocks", "--block-size",
                 "--scheduling-policy", "--seed", "--model"):  # fmt: skip
        assert flag in text
    assert "NOT a language model" in text


def test_bad_config_exits_with_a_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "serve", "--port", "0", "--profile", "no-such-gpu"]) == 2
    assert "no-such-gpu" in capsys.readouterr().err


@pytest.mark.anyio
async def test_serve_process_answers_the_openai_client() -> None:
    command = [sys.executable, "-m", "agentrt.cli", "engine", "serve", "--port", "0",
               "--time-scale", "100", "--num-gpu-blocks", "1024"]  # fmt: skip
    async with await anyio.open_process(command, stderr=subprocess.PIPE) as process:
        assert process.stderr is not None
        banner = b""
        with anyio.fail_after(30):
            while b"\n" not in banner:
                banner += await process.stderr.receive()
        match = re.search(r"http://[0-9.]+:\d+", banner.decode())
        assert match, banner
        url = match.group()
        try:
            async with AsyncOpenAI(base_url=url + "/v1", api_key="unused") as openai:
                completion = await openai.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hello"}], max_tokens=5
                )
                assert completion.choices[0].message.content
            async with httpx.AsyncClient() as http:
                assert "vllm:num_requests_running" in (await http.get(url + "/metrics")).text
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                code = await process.wait()
        assert code == 0
