"""A minimal keep-alive HTTP server in its own process for load tests: it answers every POST
with a fixed chat completion and records the agentrt headers and the first message of each
request; ``GET /captured`` returns the records as JSON.

Run: ``python capture_server.py PORT`` (prints ``ready`` once listening). A separate process
keeps the server's CPU off the client's core.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from typing import Any

_BODY = json.dumps(
    {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()


def _response(body: bytes) -> bytes:
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}"
    return head.encode() + b"\r\n\r\n" + body


captured: list[dict[str, Any]] = []


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    key, value = line.split(":", 1)
                    headers[key.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            body = await reader.readexactly(length) if length else b""
            if method == "GET" and path == "/captured":
                writer.write(_response(json.dumps(captured).encode()))
                continue
            if path.endswith("/chat/completions"):
                request = json.loads(body)
                tags = {k: v for k, v in headers.items() if k.startswith("x-agentrt-")}
                captured.append({"headers": tags, "first": request["messages"][0]["content"]})
            writer.write(_response(_BODY))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", port, backlog=4096)
    for sock in server.sockets:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1])))
