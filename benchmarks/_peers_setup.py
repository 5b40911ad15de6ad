"""The peers of ``benchmarks/peers.py``: their pinned versions, the virtual environment they
are installed into (``.peers-venv``, git-ignored, apart from ours so that their dependencies
never meet ours), and the command that starts each in front of a set of backends.

A peer that cannot be installed (no network, no wheel for this platform) is skipped with the
reason pip gave; the others still run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The peers' own virtual environment.
VENV = ROOT / ".peers-venv"

#: Peer name -> the pip requirement installed (pinned: results name these versions).
PINS = {
    "vllm-router": "vllm-router==0.1.17",
    "sglang-router": "sglang-router==0.3.2",
    "litellm": "litellm[proxy]==1.108.7",
}
#: Every proxy measured by default, ours first.
PROXIES = ("agentrt", *PINS)
#: Reference rows, not peers, measured when ``--proxies`` names them: nothing to install.
#: ``python-floor`` is the least a Python chat relay on asyncio does per call
#: (``benchmarks/_floor_proxy.py``): what our controller's stack costs above it.
REFERENCES = {"python-floor": "benchmarks/_floor_proxy.py"}
#: Ours with other options, as reference rows measured when ``--proxies`` names them:
#: ``agentrt-quiet`` writes no line per request (``--access-log off``), as the Rust routers
#: run here (their log levels write none per request; ours writes its access log by default).
VARIANTS = {"agentrt-quiet": ("--access-log", "off")}
#: Every name ``--proxies`` takes.
KNOWN = (*PROXIES, *REFERENCES, *VARIANTS)

#: LiteLLM offline: no tokenizer download from a hub, the bundled model cost map.
#: It refuses to start without a master key: the benchmark's clients send it.
LITELLM_ENV = {"HF_HUB_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one proxy: its command, extra environment, files it needs first."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    #: path -> text written before the start (LiteLLM's config).
    files: dict[Path, str] = field(default_factory=dict)


def install(peers: Sequence[str], *, log: Path) -> dict[str, str]:
    """Install ``peers`` (names of :data:`PINS`) into :data:`VENV`, each on its own so that
    one failure skips one peer. Returns ``{peer: reason}`` for those that could not be
    installed; pip's output goes to ``log``."""
    skipped: dict[str, str] = {}
    if not (VENV / "bin" / "python").exists():
        made = subprocess.run(
            [sys.executable, "-m", "venv", str(VENV)], capture_output=True, text=True
        )
        if made.returncode != 0:
            return dict.fromkeys(peers, f"cannot create {VENV}: {made.stderr.strip()[-200:]}")
    with log.open("a") as out:
        for peer in peers:
            done = subprocess.run(
                [str(VENV / "bin" / "pip"), "install", "-q", PINS[peer]],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            if done.returncode != 0:
                skipped[peer] = f"pip install {PINS[peer]} failed (see {log})"
    return skipped


def installed_version(peer: str) -> str | None:
    """The version of ``peer`` in :data:`VENV`, None when it is not installed there."""
    package = PINS[peer].split("[")[0].split("==")[0]
    done = subprocess.run(
        [str(VENV / "bin" / "python"), "-m", "pip", "show", package],
        capture_output=True,
        text=True,
    )
    for line in done.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def launch(
    proxy: str,
    port: int,
    backends: Sequence[str],
    model: str,
    workdir: Path,
    metrics_port: int,
    api_key: str,
    ours_options: Sequence[str] = (),
    time_scale: float = 1.0,
) -> Launch:
    """The command that starts ``proxy`` on loopback ``port`` in front of ``backends`` (server
    roots, ``http://host:port``) serving ``model``; ``metrics_port`` is a free port for the
    Rust routers' Prometheus listener (both default to the same one); ``api_key`` is
    LiteLLM's master key, the others take any key; ``ours_options`` go to our
    ``controller serve``, and so does ``time_scale``, the emulators' (our policies then run
    on their model seconds, as the replayed trace does; the peers keep no time of their own
    that the scale would change)."""
    host = ["--host", "127.0.0.1", "--port", str(port)]
    if proxy == "agentrt" or proxy in VARIANTS:
        argv = [sys.executable, "-m", "agentrt.cli", "controller", "serve", "--port", str(port)]
        for url in backends:
            argv += ["--backend", url]
        if time_scale != 1.0:
            argv += ["--time-scale", f"{time_scale:g}"]
        variant = VARIANTS.get(proxy, ())
        return Launch([*argv, "--log-level", "warning", *ours_options, *variant])
    if proxy in REFERENCES:
        argv = [sys.executable, str(ROOT / REFERENCES[proxy]), "--port", str(port)]
        for url in backends:
            argv += ["--backend", url]
        return Launch(argv)
    if proxy == "vllm-router":
        return Launch(
            [
                str(VENV / "bin" / "vllm-router"), *host, "--worker-urls", *backends,
                "--enable-program-scheduling", "--prometheus-port", str(metrics_port),
                "--log-level", "warning",
            ]
        )  # fmt: skip
    if proxy == "sglang-router":
        return Launch(
            [
                str(VENV / "bin" / "sglang-router"), "launch", *host, "--worker-urls", *backends,
                "--policy", "cache_aware", "--prometheus-port", str(metrics_port),
                "--log-level", "warn",
            ]
        )  # fmt: skip
    if proxy == "litellm":
        config = workdir / "litellm.yaml"
        entries = "".join(
            f"  - model_name: {model}\n    litellm_params:\n      model: openai/{model}\n"
            f"      api_base: {url}/v1\n      api_key: EMPTY\n"
            for url in backends
        )
        return Launch(
            [
                str(VENV / "bin" / "litellm"), "--config", str(config), *host,
                "--num_workers", "1",
            ],
            env={**LITELLM_ENV, "LITELLM_MASTER_KEY": api_key},
            files={config: "model_list:\n" + entries},
        )  # fmt: skip
    raise ValueError(f"unknown proxy {proxy!r}; known: {', '.join(PROXIES)}")


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment plus ``extra``."""
    return {**os.environ, **extra}
