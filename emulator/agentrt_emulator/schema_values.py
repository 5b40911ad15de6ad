"""Generate a JSON value that is valid against a JSON Schema (the subset tools and structured
outputs use): ``type`` (one or a list), ``enum``, ``const``, ``properties`` / ``required`` /
``additionalProperties``, ``items`` / ``prefixItems`` / ``minItems`` / ``maxItems``,
``minimum`` / ``maximum`` / ``exclusiveMinimum`` / ``exclusiveMaximum`` / ``multipleOf``,
``minLength`` / ``maxLength``, ``format`` (date, date-time, time, email, uri, uuid),
``anyOf`` / ``oneOf`` (first branch that is not ``null``), ``allOf`` (merged), local ``$ref``
(``#/$defs/...``, ``#/definitions/...``) and ``nullable``. ``pattern`` is not honoured.

Deterministic: the same schema and the same :class:`random.Random` state give the same value.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

__all__ = ["FILLER_WORDS", "value_for_schema"]

#: Words the scripted model writes. Each is one token of :mod:`agentrt_emulator.tokenizer` with a
#: leading space (at most 6 letters).
FILLER_WORDS: tuple[str, ...] = (
    "the", "a", "plan", "step", "data", "result", "value", "check", "next", "first", "then",
    "tool", "query", "answer", "note", "list", "item", "table", "city", "price", "order",
    "report", "fact", "source", "page", "file", "search", "update", "record", "user", "task",
    "time", "date", "number", "field", "entry", "model", "test", "case", "input", "output",
    "good", "more", "less", "new", "old", "fast", "slow", "clear", "final", "short", "long",
    "this", "that", "with", "from", "into", "over", "under", "about", "after", "before",
    "is", "are", "was", "will", "can", "may", "should", "found", "made", "used", "seen",
    "shows", "gives", "takes", "needs", "keeps", "moves", "reads", "writes", "sends", "holds",
    "and", "or", "but", "so", "also", "still", "only", "each", "every", "some", "most",
)  # fmt: skip

_MAX_DEPTH = 8
_DEFAULT_MAX_ITEMS = 3


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(FILLER_WORDS) for _ in range(max(1, count)))


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    seen = 0
    while "$ref" in schema and seen < _MAX_DEPTH:
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return {}
        node: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or part not in node:
                return {}
            node = node[part]
        schema = node if isinstance(node, Mapping) else {}
        seen += 1
    return schema


def _merge_all_of(schema: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema.get("allOf") or ():
        sub = _resolve(part, root) if isinstance(part, Mapping) else {}
        for key, value in sub.items():
            if key == "properties" and isinstance(value, Mapping):
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def _pick_type(schema: Mapping[str, Any]) -> str:
    declared = schema.get("type")
    if isinstance(declared, list):
        non_null = [t for t in declared if t != "null"]
        return str(non_null[0]) if non_null else "null"
    if isinstance(declared, str):
        return declared
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
        return "number"
    return "string"


def _string(schema: Mapping[str, Any], rng: random.Random) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        value = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    elif fmt == "date-time":
        value = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T12:00:00Z"
    elif fmt == "time":
        value = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00"
    elif fmt == "email":
        value = f"{rng.choice(FILLER_WORDS)}@example.com"
    elif fmt in ("uri", "url"):
        value = f"https://example.com/{rng.choice(FILLER_WORDS)}"
    elif fmt == "uuid":
        value = "%08x-%04x-4%03x-8%03x-%012x" % (  # noqa: UP031 (fixed-width hex fields)
            rng.getrandbits(32),
            rng.getrandbits(16),
            rng.getrandbits(12),
            rng.getrandbits(12),
            rng.getrandbits(48),
        )
    else:
        value = _words(rng, rng.randint(1, 4))
    min_len = int(schema.get("minLength", 0) or 0)
    max_len = schema.get("maxLength")
    while len(value) < min_len:
        value += " " + _words(rng, 2)
    if isinstance(max_len, int) and len(value) > max_len:
        value = value[: max(max_len, min_len)]
    return value


def _number(schema: Mapping[str, Any], rng: random.Random, integer: bool) -> int | float:
    low = schema.get("minimum")
    high = schema.get("maximum")
    ex_low = schema.get("exclusiveMinimum")
    ex_high = schema.get("exclusiveMaximum")
    lo = -math.inf if low is None else float(low)
    hi = math.inf if high is None else float(high)
    if isinstance(ex_low, int | float) and not isinstance(ex_low, bool):
        lo = max(lo, float(ex_low) + (1 if integer else 1e-6))
    if isinstance(ex_high, int | float) and not isinstance(ex_high, bool):
        hi = min(hi, float(ex_high) - (1 if integer else 1e-6))
    if math.isinf(lo) and math.isinf(hi):
        lo, hi = 0.0, 100.0
    elif math.isinf(lo):
        lo = hi - 100.0
    elif math.isinf(hi):
        hi = lo + 100.0
    multiple = schema.get("multipleOf")
    if integer:
        first, last = math.ceil(lo), math.floor(hi)
        if isinstance(multiple, int) and multiple > 0:
            first = math.ceil(first / multiple) * multiple
            choices = range(first, last + 1, multiple)
            return rng.choice(choices) if len(choices) else first
        return rng.randint(first, max(first, last))
    if isinstance(multiple, int | float) and multiple > 0:
        first_k, last_k = math.ceil(lo / multiple), math.floor(hi / multiple)
        return rng.randint(first_k, max(first_k, last_k)) * multiple
    return round(rng.uniform(lo, hi), 3) if hi > lo else lo


def value_for_schema(
    schema: Mapping[str, Any] | bool,
    rng: random.Random,
    *,
    root: Mapping[str, Any] | None = None,
    depth: int = 0,
) -> Any:
    """A JSON-serialisable value valid against ``schema`` (see the module docstring)."""
    if schema is True or schema is False or not isinstance(schema, Mapping):
        return _words(rng, 2)
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if "allOf" in schema:
        schema = _merge_all_of(schema, root)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            usable = [
                b for b in branches if not (isinstance(b, Mapping) and b.get("type") == "null")
            ]
            branch = usable[0] if usable else branches[0]
            return value_for_schema(branch, rng, root=root, depth=depth + 1)
    kind = _pick_type(schema)
    if kind == "null":
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind in ("integer", "number"):
        return _number(schema, rng, integer=kind == "integer")
    if kind == "array":
        return _array(schema, rng, root, depth)
    if kind == "object":
        return _object(schema, rng, root, depth)
    return _string(schema, rng)


def _array(
    schema: Mapping[str, Any], rng: random.Random, root: Mapping[str, Any], depth: int
) -> Any:
    min_items = int(schema.get("minItems", 0) or 0)
    max_items = schema.get("maxItems")
    high = max_items if isinstance(max_items, int) else max(min_items, _DEFAULT_MAX_ITEMS)
    count = min_items if depth >= _MAX_DEPTH else rng.randint(min_items, max(min_items, high))
    if min_items == 0 and count == 0 and high > 0:
        count = 1
    prefix = schema.get("prefixItems")
    prefix_list = list(prefix) if isinstance(prefix, list) else []
    items_schema = schema.get("items", {})
    out: list[Any] = []
    for index in range(count):
        sub = prefix_list[index] if index < len(prefix_list) else items_schema
        out.append(value_for_schema(sub, rng, root=root, depth=depth + 1))
    return out


def _object(
    schema: Mapping[str, Any], rng: random.Random, root: Mapping[str, Any], depth: int
) -> Any:
    properties = schema.get("properties")
    props: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
    required = [r for r in schema.get("required") or () if isinstance(r, str)]
    out: dict[str, Any] = {}
    for name, sub in props.items():
        if name in required or (depth < _MAX_DEPTH and rng.random() < 0.5):
            out[name] = value_for_schema(sub, rng, root=root, depth=depth + 1)
    extra_schema = schema.get("additionalProperties", True)
    for name in required:
        if name not in out:
            sub = extra_schema if isinstance(extra_schema, Mapping) else {}
            out[name] = value_for_schema(sub, rng, root=root, depth=depth + 1)
    if not props and not required and extra_schema is not False and depth == 0:
        sub = extra_schema if isinstance(extra_schema, Mapping) else {"type": "string"}
        out["answer"] = value_for_schema(sub, rng, root=root, depth=depth + 1)
    return out
