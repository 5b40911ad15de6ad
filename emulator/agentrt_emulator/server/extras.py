"""``POST /detokenize`` (vLLM's) and ``POST /v1/embeddings`` (OpenAI's), as far as a scripted
model can answer them.

* ``/detokenize`` — ``{"tokens": [ids], "model"?}`` → ``{"prompt": text}``. The emulator's
  tokenizer is a hash of each piece, not a vocabulary (:mod:`agentrt_emulator.tokenizer`), so
  an id is turned back into text only when this server has tokenized or generated its piece
  (its tokenizer's cache; every prompt and every scripted output goes through it); special
  tokens are empty, any other id reads ``<unk:ID>``.
* ``/v1/embeddings`` — ``input``: a string, a list of strings, a list of token ids or a list of
  such lists; ``dimensions`` (default :data:`DEFAULT_DIMENSIONS`); ``encoding_format``
  ``float`` or ``base64`` (little-endian float32, what the ``openai`` client asks for by
  default). The vector is **not** a meaning: it is a deterministic bag-of-tokens hash — each
  token id adds ±1 to :data:`_BUCKETS_PER_TOKEN` coordinates chosen by a BLAKE2b digest of the
  id, and the sum is scaled to unit length — so equal texts get equal vectors, texts that
  share tokens are close, and the answer's shape and usage are those of a real server.
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentrt.errors import InvalidRequest
from agentrt_emulator.server.body import read_json
from agentrt_emulator.server.state import EmulatorState
from agentrt_emulator.tokenizer import NUM_SPECIAL

__all__ = ["DEFAULT_DIMENSIONS", "ExtraEndpoints", "embedding"]

#: Length of an embedding when the request names no ``dimensions``.
DEFAULT_DIMENSIONS = 256
_MAX_DIMENSIONS = 4096
_BUCKETS_PER_TOKEN = 4


def embedding(token_ids: Sequence[int], dimensions: int) -> list[float]:
    """The unit-length bag-of-tokens vector of ``token_ids`` (module docstring); all zeros
    for no tokens."""
    vector = [0.0] * dimensions
    for token_id in token_ids:
        digest = hashlib.blake2b(token_id.to_bytes(8, "little", signed=True), digest_size=16)
        raw = digest.digest()
        for bucket in range(_BUCKETS_PER_TOKEN):
            word = int.from_bytes(raw[4 * bucket : 4 * bucket + 4], "little")
            vector[(word >> 1) % dimensions] += 1.0 if word & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else vector


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(x, int) and not isinstance(x, bool) for x in value
    )


class ExtraEndpoints:
    """``/detokenize`` and ``/v1/embeddings`` over one emulator's state."""

    def __init__(self, state: EmulatorState) -> None:
        self.state = state

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model is not None and model != self.state.config.model_name:
            raise InvalidRequest(
                f"The model `{model}` does not exist; this server serves "
                f"`{self.state.config.model_name}`.",
                status_code=404,
                param="model",
            )

    async def detokenize(self, request: Request) -> Response:
        body = await read_json(request, self.state.config.max_body_bytes)
        self._check_model(body)
        tokens = body.get("tokens")
        if not isinstance(tokens, list) or not _int_list(tokens):
            raise InvalidRequest("tokens must be a list of integers", param="tokens")
        # The tokenizer's cache maps each piece it saw to its id; read it backwards.
        known = {token_id: piece for piece, token_id in self.state.tokenizer._ids.items()}
        text = "".join("" if 0 <= t < NUM_SPECIAL else known.get(t, f"<unk:{t}>") for t in tokens)
        return JSONResponse({"prompt": text})

    async def embeddings(self, request: Request) -> Response:
        body = await read_json(request, self.state.config.max_body_bytes)
        self._check_model(body)
        dimensions = body.get("dimensions", DEFAULT_DIMENSIONS)
        if (
            isinstance(dimensions, bool)
            or not isinstance(dimensions, int)
            or not 1 <= dimensions <= _MAX_DIMENSIONS
        ):
            raise InvalidRequest(
                f"dimensions must be an integer in [1, {_MAX_DIMENSIONS}]", param="dimensions"
            )
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise InvalidRequest("encoding_format must be float or base64", param="encoding_format")
        inputs = self._token_lists(body.get("input"))
        data = []
        used = 0
        for index, ids in enumerate(inputs):
            used += len(ids)
            vector = embedding(ids, dimensions)
            value: Any = vector
            if encoding == "base64":
                value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": value})
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": self.state.config.model_name,
                "usage": {"prompt_tokens": used, "total_tokens": used},
            }
        )

    def _token_lists(self, value: Any) -> list[list[int]]:
        tokenizer = self.state.tokenizer
        if isinstance(value, str):
            return [tokenizer.encode(value)]
        if isinstance(value, list) and value:
            if all(isinstance(item, str) for item in value):
                return [tokenizer.encode(item) for item in value]
            if _int_list(value):
                return [list(value)]
            if all(_int_list(item) for item in value):
                return [list(item) for item in value]
        raise InvalidRequest(
            "input must be a string, a list of strings or a list of token ids", param="input"
        )
