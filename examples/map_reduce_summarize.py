"""Map-reduce summariser of a long local text: summarise chunks in parallel, then combine.

    .venv/bin/python examples/map_reduce_summarize.py                        # embedded emulator
    .venv/bin/python examples/map_reduce_summarize.py --base-url URL --file my.txt

The map calls run as parallel threads of one program tagged ``objective=throughput``; the
reduce call is tagged ``latency`` (Parrot, OSDI 2024: its deduction for such programs).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common

import agentrt
from agentrt import Runtime

DEFAULT_TEXT = Path(__file__).resolve().parent / "data" / "lighthouse.txt"


def chunk_text(text: str, max_chars: int) -> list[str]:
    """Split on paragraph boundaries into chunks of at most ``max_chars`` characters
    (a longer paragraph becomes a chunk of its own)."""
    chunks: list[str] = []
    current = ""
    for paragraph in (p.strip() for p in text.split("\n\n")):
        if not paragraph:
            continue
        if current and len(current) + len(paragraph) + 2 > max_chars:
            chunks.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        chunks.append(current)
    return chunks


async def main() -> int:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--file", type=Path, default=DEFAULT_TEXT, help="text to summarise")
    p.add_argument("--chunk-chars", type=int, default=1200)
    p.add_argument("--limit", type=int, default=4, help="map calls at once")
    args = p.parse_args()
    chunks = chunk_text(args.file.read_text(), args.chunk_chars)
    telemetry = _common.telemetry_for(args)

    async def summarise(chunk: str) -> str:
        reply = await agentrt.chat(
            [
                {"role": "system", "content": "Summarise the passage in two sentences."},
                {"role": "user", "content": chunk},
            ],
            max_tokens=96,
        )
        return reply.choices[0].message.content or ""

    async def combine(summaries: list[str]) -> str:
        numbered = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(summaries))
        reply = await agentrt.chat(
            [
                {
                    "role": "system",
                    "content": "Combine these partial summaries into one paragraph.",
                },
                {"role": "user", "content": numbered},
            ],
            max_tokens=200,
        )
        return reply.choices[0].message.content or ""

    started = time.perf_counter()
    async with _common.endpoint(args) as where:
        config = _common.runtime_config(args, where, telemetry)
        async with Runtime(config) as rt, rt.program("summarise", timeout_s=args.timeout_s) as prog:
            summary = await agentrt.map_reduce(chunks, summarise, combine, limit=args.limit)
    elapsed = time.perf_counter() - started
    doc = prog.to_dict()
    tokens = sum((n["input_tokens"] or 0) + (n["output_tokens"] or 0) for n in doc["nodes"])
    print(
        f"{args.file.name}: {len(chunks)} chunks, {len(doc['nodes'])} LLM calls in "
        f"{len(doc['threads'])} threads, {tokens} tokens, {elapsed:.2f} s, {prog.status}"
    )
    print(f"summary: {summary[:600]}")
    return _common.finish(where, telemetry, filler="not real summaries")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
