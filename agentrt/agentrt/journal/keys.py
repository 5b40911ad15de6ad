"""Canonical JSON, argument hashes, idempotency keys and result encoding.

Idempotency key (stable across re-runs of the same program)::

    key = "agentrt-" + sha256_hex(canonical_json(
              ["agentrt-journal-key/1", program_id, thread_id, seq, kind, name, args_hash]))

``args_hash`` is the SHA-256 of the canonical JSON of the arguments (keys sorted, no
whitespace, UTF-8, NaN/Infinity refused). Attempt semantics: the key is the same for every
attempt of a step — the re-run after a crash, a retry after FAILED, the run after a
``not_done`` reconciliation — so a provider that deduplicates on the key collapses all of
them into one effect. The attempt number is recorded in the journal, not in the key.
"""

from __future__ import annotations

import hashlib
import json

from agentrt.errors import JournalError, ResultNotSerializable
from agentrt.json_types import JSONValue

__all__ = [
    "ArgumentsNotSerializable",
    "arguments_hash",
    "canonical_json",
    "decode_result",
    "encode_result",
    "idempotency_key",
]

_KEY_DOMAIN = "agentrt-journal-key/1"


class ArgumentsNotSerializable(JournalError, TypeError):
    """A step's arguments are not JSON-able, so the step has no stable identity."""


def canonical_json(value: object) -> str:
    """JSON with sorted keys and no whitespace; raises ``TypeError``/``ValueError``."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def arguments_hash(arguments: object) -> str:
    """SHA-256 (64 hex chars) of the canonical JSON of ``arguments``."""
    try:
        text = canonical_json(arguments)
    except (TypeError, ValueError) as exc:
        raise ArgumentsNotSerializable(
            f"step arguments are not JSON-serialisable ({exc}); the journal needs JSON-able "
            "arguments to give the step a stable identity"
        ) from exc
    return hashlib.sha256(text.encode()).hexdigest()


def idempotency_key(
    program_id: str, thread_id: str, seq: int, kind: str, name: str, args_hash: str
) -> str:
    """The step's idempotency key (72 characters, ``agentrt-`` + 64 hex)."""
    material = canonical_json([_KEY_DOMAIN, program_id, thread_id, seq, kind, name, args_hash])
    return "agentrt-" + hashlib.sha256(material.encode()).hexdigest()


def encode_result(result: object, *, what: str) -> str:
    """JSON text of a result that replays as an equal value, else ``ResultNotSerializable``.

    A value that JSON changes on the way (a tuple becoming a list, an int dict key becoming a
    string) is refused too: a replay must return what the first run returned.
    ``what`` names the step in the error message.
    """
    try:
        text = json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ResultNotSerializable(
            f"the result of {what} is not JSON-serialisable ({exc}); return JSON-able data "
            "(dict, list, str, int, float, bool, None)"
        ) from exc
    decoded = json.loads(text)
    if decoded != result or not _same_shape(decoded, result):
        raise ResultNotSerializable(
            f"the result of {what} does not survive a JSON round trip unchanged (tuples, "
            "non-string dict keys or subclasses of basic types); return plain JSON data"
        )
    return text


def _same_shape(decoded: object, original: object) -> bool:
    """True when ``original`` uses exactly JSON's container and scalar types (``decoded``: its
    JSON round trip, equal to it)."""
    if isinstance(original, bool) or original is None:
        return decoded is original
    if type(original) in (int, float, str):
        return type(decoded) is type(original)
    if type(original) is list and isinstance(original, list) and isinstance(decoded, list):
        return len(decoded) == len(original) and all(
            _same_shape(d, o) for d, o in zip(decoded, original, strict=True)
        )
    if type(original) is dict and isinstance(original, dict) and isinstance(decoded, dict):
        return all(type(k) is str for k in original) and all(
            _same_shape(decoded[k], v) for k, v in original.items()
        )
    return False


def decode_result(text: str | None) -> JSONValue:
    """The result stored by :func:`encode_result` (``None`` for no text)."""
    return None if text is None else json.loads(text)
