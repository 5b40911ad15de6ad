"""What the replay asks the server before and after a run (plain HTTP, outside any program).

* :func:`check_base_url`: the OpenAI base URL must end in ``/v1``; the server root (where
  vLLM, the emulator and the controller serve ``/tokenize`` and ``/metrics``) is the rest.
* :func:`discover_model`: the first model of ``GET /v1/models``.
* :func:`calibrate`: the chat template's costs from ``POST /tokenize`` (vLLM's and the
  emulator's), or the defaults of :class:`~agentrt_sim.replay.prompts.TemplateCosts`.
* :func:`max_model_len`: the longest prompt + output the server accepts, from ``/v1/models``
  (vLLM's and the emulator's ``max_model_len``) or ``/tokenize`` (a controller lists none);
* :func:`accepts_ignore_eos`: one 1-token call with ``ignore_eos`` (vLLM's sampling extension);
  a 400 that names it means the server refuses it.
* :func:`scrape_counters`: ``vllm:prefix_cache_hits_total``, ``..._queries_total`` and
  ``vllm:num_preemptions_total`` summed over ``GET /metrics``;
* :func:`check_time_scale`: the emulator's ``agentrt_engine_time_scale`` in that text must be
  the replay's ``--time-scale``.

Every failure to reach the server is raised as :class:`ReplayError` naming the URL, never as
an httpx error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from agentrt.errors import ConfigError
from agentrt_controller.backends.emulator import engine_time_scale, time_scales_differ
from agentrt_controller.backends.prometheus_text import sum_samples
from agentrt_sim.replay.prompts import TemplateCosts, filler

__all__ = [
    "COUNTERS",
    "ReplayError",
    "accepts_ignore_eos",
    "calibrate",
    "check_base_url",
    "check_time_scale",
    "counters",
    "discover_model",
    "max_model_len",
    "scrape_counters",
    "scrape_metrics",
]


class ReplayError(ConfigError):
    """The replay cannot run against this server (unreachable, no model, bad base URL)."""


def check_base_url(base_url: str) -> str:
    """The server root of ``base_url`` (``http://host:port/v1`` -> ``http://host:port``)."""
    url = base_url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ReplayError(f"--base-url must be an http(s) URL, got {base_url!r}")
    if not url.endswith("/v1"):
        raise ReplayError(f"--base-url must be the OpenAI base URL ending in /v1, got {base_url!r}")
    return url[: -len("/v1")]


async def _request(
    http: httpx.AsyncClient, method: str, url: str, body: Mapping[str, Any] | None = None
) -> httpx.Response:
    try:
        return await http.request(method, url, json=body)
    except httpx.HTTPError as exc:
        raise ReplayError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc


async def discover_model(http: httpx.AsyncClient, base_url: str) -> str:
    """The first model id the server lists at ``GET {base_url}/models``."""
    url = base_url.rstrip("/") + "/models"
    response = await _request(http, "GET", url)
    if response.status_code != 200:
        raise ReplayError(f"GET {url} answered {response.status_code}: pass --model")
    try:
        models = response.json()["data"]
        return str(models[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ReplayError(f"GET {url} lists no model: pass --model") from exc


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def max_model_len(
    http: httpx.AsyncClient, base_url: str, tokenize_root: str, model: str
) -> int | None:
    """The longest prompt + output the server takes (tokens): ``max_model_len`` of ``model``
    in ``GET {base_url}/models`` (vLLM, the emulator), else of ``POST {tokenize_root}/tokenize``
    (behind a controller, which lists none: the engine's); None when neither says."""
    response = await _request(http, "GET", base_url.rstrip("/") + "/models")
    try:
        for entry in response.json()["data"]:
            if entry.get("id") == model and _positive_int(entry.get("max_model_len")):
                return int(entry["max_model_len"])
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    body = {"model": model, "prompt": "ping", "add_special_tokens": False}
    response = await _request(http, "POST", tokenize_root + "/tokenize", body)
    if response.status_code != 200:
        return None
    try:
        return _positive_int(response.json().get("max_model_len"))
    except (ValueError, AttributeError):
        return None


async def _count(http: httpx.AsyncClient, root: str, body: dict[str, Any]) -> int | None:
    response = await _request(http, "POST", root + "/tokenize", body)
    if response.status_code != 200:
        return None
    try:
        return int(response.json()["count"])
    except (ValueError, KeyError, TypeError):
        return None


async def calibrate(http: httpx.AsyncClient, root: str, model: str) -> TemplateCosts:
    """Measure the template's costs with ``/tokenize``; the defaults when it is missing.

    Differences of renderings with one more message give each message kind's overhead; the
    filler's own size is counted as a plain prompt without special tokens.
    """
    words = 200
    system, user, assistant = (filler(words, "calibrate", part) for part in ("s", "u", "a"))

    async def prompt(text: str) -> int | None:
        body = {"model": model, "prompt": text, "add_special_tokens": False}
        return await _count(http, root, body)

    async def chat(messages: Sequence[tuple[str, str]], generation: bool) -> int | None:
        body = {
            "model": model,
            "messages": [{"role": role, "content": text} for role, text in messages],
            "add_generation_prompt": generation,
        }
        return await _count(http, root, body)

    counts = [await prompt(text) for text in (system, user, assistant)]
    conversation = [("system", system), ("user", user), ("assistant", assistant)]
    rendered = [await chat(conversation[:n], False) for n in (1, 2, 3)]
    with_generation = await chat(conversation[:2], True)
    if None in counts or None in rendered or with_generation is None:
        return TemplateCosts()
    s, u, a = (int(c) for c in counts if c is not None)
    one, two, three = (int(r) for r in rendered if r is not None)
    return TemplateCosts(
        tokens_per_word=(s + u + a) / (3 * words),
        system_overhead=one - s,
        user_overhead=two - one - u,
        assistant_overhead=three - two - a,
        generation_prompt=with_generation - two,
        measured=True,
    )


async def accepts_ignore_eos(http: httpx.AsyncClient, base_url: str, model: str) -> bool:
    """Whether a chat call with ``ignore_eos`` succeeds (one generated token)."""
    url = base_url.rstrip("/") + "/chat/completions"
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "ping"}],
        "max_tokens": 1,
        "ignore_eos": True,
    }
    response = await _request(http, "POST", url, body)
    if response.status_code == 200:
        return True
    if response.status_code in (400, 422) and "ignore_eos" in response.text:
        return False
    raise ReplayError(f"POST {url} answered {response.status_code}: {response.text[:200]}")


#: Counters read from ``/metrics`` (vLLM's names; the emulator exposes the same).
COUNTERS = (
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "vllm:num_preemptions_total",
)


async def scrape_metrics(http: httpx.AsyncClient, root: str) -> str:
    """The text of ``GET {root}/metrics``; empty when it cannot be read."""
    try:
        response = await http.get(root + "/metrics")
    except httpx.HTTPError:
        return ""
    return response.text if response.status_code == 200 else ""


def counters(text: str) -> dict[str, float]:
    """Each of :data:`COUNTERS` that a ``/metrics`` text exposes, summed over its series
    (several engines behind one URL add up); absent names are left out."""
    return sum_samples(text, COUNTERS)


async def scrape_counters(http: httpx.AsyncClient, root: str) -> dict[str, float]:
    """:func:`counters` of ``GET {root}/metrics``."""
    return counters(await scrape_metrics(http, root))


def check_time_scale(text: str, time_scale: float, root: str) -> None:
    """Refuse a replay whose ``--time-scale`` is not the engine's (the emulator's
    ``agentrt_engine_time_scale`` in a ``/metrics`` text of ``root``; a server that publishes
    none is not checked): its arrivals and tool waits would be that many times off against
    the engine's model seconds, and its results with them."""
    scale = engine_time_scale(text)
    if time_scales_differ(scale, time_scale):
        raise ReplayError(
            f"the engine at {root} runs at time scale {scale:g} and this replay at "
            f"{time_scale:g}: give --time-scale {scale:g} (and start a controller in "
            f"front of it with the same --time-scale)"
        )
