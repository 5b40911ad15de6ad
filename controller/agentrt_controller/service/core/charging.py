"""What a finished call is charged: token counts from the backend's ``usage``, turned into
seconds of service by the cost model (docs/controller.md, "What a call is charged"; the
program-level service of Autellix, arXiv 2502.13965, measured at a proxy).

Charged work = uncached prompt tokens (``usage.prompt_tokens -
usage.prompt_tokens_details.cached_tokens``) and generated tokens
(``usage.completion_tokens``). When the backend sent no usage, the prompt is estimated from the
body size (bytes / 4 with the model's learned factor, ``service/http/prompt_size.py``; all
uncached) and the output from the streamed chunks (one per token).
Proxy wall time is never charged: it includes the backend's own queueing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from agentrt_controller.cost_model import CostFunction
from agentrt_controller.scheduling.call import CallFacts

__all__ = ["Charge", "Charger", "Usage"]


def _int(value: Any) -> int | None:
    # ``type() is int``: JSON's integers (not bool, a subclass of int), in one test.
    return value if type(value) is int and value >= 0 else None


class Usage:
    """Token counts of one call as far as known (``None`` = the backend did not say)."""

    __slots__ = ("cached_tokens", "completion_tokens", "prompt_tokens", "streamed_chunks")

    def __init__(self) -> None:
        self.prompt_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.completion_tokens: int | None = None
        #: Stream chunks that carried choices (≈ output tokens).
        self.streamed_chunks = 0

    def read_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.prompt_tokens = _int(usage.get("prompt_tokens"))
        self.completion_tokens = _int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            self.cached_tokens = _int(details.get("cached_tokens"))

    def read_body(self, body: bytes) -> None:
        """Usage from a whole (non-streamed) JSON answer; ignores anything unparsable."""
        if b'"usage"' not in body:
            return
        try:
            parsed = _loads(body)
        except ValueError:
            return
        if isinstance(parsed, dict):
            self.read_usage(parsed.get("usage"))


#: orjson reads an integer past 64 bits as a float at least this large (``json``: an int).
_PAST_64_BITS = 2.0**63


def _loads(body: bytes) -> Any:
    """``json.loads(body)``'s value (raises :class:`ValueError` alike), parsed by orjson when
    that gives the same usage: orjson is several times faster, but refuses what ``json``
    takes (``NaN``, lone surrogates, UTF-16) and makes integers past 64 bits floats."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)
    usage = value.get("usage") if isinstance(value, dict) else None
    if isinstance(usage, dict) and _holds_huge_float(usage):
        return json.loads(body)
    return value


def _holds_huge_float(usage: dict[str, Any]) -> bool:
    """One of the counts :meth:`Usage.read_usage` reads is a float past 64 bits (a loop, not
    a generator: this runs on every whole answer)."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    for value in (usage.get("prompt_tokens"), usage.get("completion_tokens"), cached):
        if type(value) is float and value >= _PAST_64_BITS:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Charge:
    """Service charged to one call."""

    #: Prompt tokens (reported, or estimated from the body size).
    prompt_tokens: int
    #: Prompt tokens that had to be computed (not served from a prefix cache).
    uncached_prompt_tokens: int
    #: Output tokens (reported, or counted stream chunks).
    output_tokens: int
    #: Service (seconds) from the cost model.
    service_s: float


class Charger:
    """Turns :class:`Usage` into a :class:`Charge` with ``cost`` (the cost model's
    :meth:`~agentrt_controller.cost_model.CostModel.service_s`, unless replaced)."""

    def __init__(self, cost: CostFunction) -> None:
        self._cost = cost

    def charge(self, usage: Usage, call: CallFacts) -> Charge:
        prompt = usage.prompt_tokens if usage.prompt_tokens is not None else call.prompt_tokens
        cached = min(usage.cached_tokens or 0, prompt)
        output = usage.completion_tokens
        if output is None:
            output = usage.streamed_chunks
        return Charge(prompt, prompt - cached, output, self._cost(prompt - cached, output))
