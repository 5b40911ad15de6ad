"""JSON as a type: what ``json.loads`` returns and ``json.dumps`` takes.

Used where the SDK holds JSON data of its own making (journal results, span views, tool
results, request bodies it reads): a precise type instead of ``Any``.
"""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JSONObject", "JSONValue"]

#: A JSON value: null, a boolean, a number, a string, an array or an object.
JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"
#: A JSON object.
JSONObject: TypeAlias = "dict[str, JSONValue]"
