"""Reading request bodies: size limit (413) and JSON parsing (400)."""

from __future__ import annotations

import json
from typing import Any

import anyio.to_thread
from starlette.requests import Request

from agentrt.errors import InvalidRequest

__all__ = ["read_json"]

#: Bodies at least this large (bytes) are decoded in a worker thread, off the event loop.
_THREAD_BYTES = 1024 * 1024


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request body as a JSON object; 413 past ``limit`` bytes, 400 when malformed."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise InvalidRequest(f"request body larger than {limit} bytes", status_code=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise InvalidRequest(f"request body larger than {limit} bytes", status_code=413)
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        if len(raw) >= _THREAD_BYTES:
            body = await anyio.to_thread.run_sync(json.loads, raw)
        else:
            body = json.loads(raw)
    except RecursionError:
        raise InvalidRequest("JSON body nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"Malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object")
    return body
