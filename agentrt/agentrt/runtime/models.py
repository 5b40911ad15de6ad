"""Which model a server serves: ``GET {base_url}/models``, the one place the SDK, the examples
and the command-line tools discover the model when none is named.

One model served: it is used. Several: the first one the server lists is used and a warning
names it and the others. Refusing would stop the commonest case cold — vLLM lists its base
model first and its LoRA adapters after it, and our controller lists its backends' models in
their configured order — while the warning tells the user how to choose (``model=`` or
``--model``). None served: :class:`~agentrt.errors.LLMCallError`.

Failures name the URL and suggest the fix (:func:`agentrt.errors.unreachable_message`,
:func:`agentrt.errors.http_error_message`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import httpx

from agentrt.errors import (
    EndpointUnavailable,
    LLMCallError,
    http_error_message,
    unreachable_message,
)

__all__ = ["ServedModel", "choose_model", "discover_model", "served_models"]

_log = logging.getLogger("agentrt.models")

#: Timeout (seconds) of the model list request.
DEFAULT_TIMEOUT_S = 10.0


async def served_models(
    base_url: str,
    api_key: str = "EMPTY",
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[str]:
    """The ids ``GET {base_url}/models`` lists, in the server's order (may be empty).

    ``transport``: the HTTP transport to send through (None = a fresh connection).
    Raises :class:`~agentrt.errors.EndpointUnavailable` when the server cannot be reached and
    :class:`~agentrt.errors.LLMCallError` (with ``status_code``) when it answers an error or
    something that is not a model list; both messages name the URL and suggest the fix."""
    url = base_url.rstrip("/") + "/models"
    headers = {"authorization": f"Bearer {api_key}"}
    try:
        async with httpx.AsyncClient(transport=transport, timeout=timeout_s) as http:
            response = await http.get(url, headers=headers)
    except (httpx.HTTPError, OSError) as exc:
        raise EndpointUnavailable(unreachable_message(base_url, exc)) from exc
    if response.is_error:
        raise LLMCallError(
            http_error_message(base_url, url, response.status_code, _error_text(response)),
            status_code=response.status_code,
        )
    try:
        entries = response.json()["data"]
        return [str(entry["id"]) for entry in entries]
    except (ValueError, KeyError, TypeError) as exc:
        raise LLMCallError(
            f"{url} did not answer an OpenAI model list ({exc!r}); is {base_url} an "
            "OpenAI-compatible endpoint (it usually ends in /v1)?",
            status_code=response.status_code,
        ) from exc


def choose_model(models: Sequence[str], base_url: str) -> str:
    """The model to use among those ``base_url`` serves (see the module docstring).

    Raises :class:`~agentrt.errors.LLMCallError` when there is none."""
    if not models:
        raise LLMCallError(f"{base_url} serves no model (GET {base_url.rstrip('/')}/models)")
    if len(models) > 1:
        others = ", ".join(models[1:])
        _log.warning(
            "%s serves several models; using the first, %s (others: %s); name one with model=",
            base_url,
            models[0],
            others,
        )
    return models[0]


async def discover_model(
    base_url: str,
    api_key: str = "EMPTY",
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> str:
    """The model ``base_url`` serves: its only one, or the first of several (with a warning).

    Raises as :func:`served_models` does, and :class:`~agentrt.errors.LLMCallError` when the
    server serves no model."""
    models = await served_models(base_url, api_key, transport=transport, timeout_s=timeout_s)
    return choose_model(models, base_url)


class ServedModel:
    """One runtime's discovered model: asked of the server once, on first need, then kept.

    Concurrent first calls share one request; a failed discovery is not kept (the next call
    asks again, e.g. once the server is up)."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self._base_url = base_url
        self._api_key = api_key
        self._model: str | None = None
        self._lock = anyio.Lock()

    @property
    def known(self) -> str | None:
        """The model once discovered, None before."""
        return self._model

    async def get(self, transport: httpx.AsyncBaseTransport | None = None) -> str:
        """The model (discovered through ``transport`` on first call); raises as
        :func:`discover_model` does."""
        if self._model is not None:
            return self._model
        async with self._lock:
            if self._model is None:
                self._model = await discover_model(
                    self._base_url, self._api_key, transport=transport
                )
            return self._model


def _error_text(response: httpx.Response) -> str:
    """The server's error message: OpenAI's ``{"error": {"message": ...}}`` or the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(body.get("detail"), str):
            return str(body["detail"])
    return response.text[:300]
