"""A small real SDK run against the engine emulator on loopback, its spans captured in memory
and written in the demo's span-file format (``agentrt_demo.traces.write_trace``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentrt
from agentrt import Runtime, RuntimeConfig, tool
from agentrt.program.model import ProgramGraph
from agentrt_demo.traces import records_from_sdk, write_trace
from agentrt_emulator.server import DEFAULT_MODEL_NAME, EmulatorConfig, serve_engine

#: Seconds each tool sleeps, by name.
TOOL_SLEEP_S = {"search": 0.15, "lookup": 0.05}
#: Seconds the fan-out program waits (an ``agentrt.wait``: no span of its own).
WAIT_S = 0.1


@tool
async def search(query: str) -> str:
    """Search for something (sleeps)."""
    await anyio.sleep(TOOL_SLEEP_S["search"])
    return f"results for {query}"


@tool
async def lookup(key: str) -> str:
    """Look a key up (sleeps)."""
    await anyio.sleep(TOOL_SLEEP_S["lookup"])
    return f"value of {key}"


@dataclass(frozen=True)
class RecordedRun:
    """The span files and, per program name, the SDK's own record of the program's DAG."""

    #: Written by the demo's writer (hex ids, OTLP enums as numbers).
    spans_file: Path
    #: The same spans in the OpenTelemetry exporter's own OTLP protobuf encoding, as proto3
    #: JSON (base64 ids, enums by name).
    otlp_file: Path
    graphs: dict[str, ProgramGraph]


def _user(text: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You are a careful agent. " * 20},
        {"role": "user", "content": text},
    ]


async def _chat(text: str, output_tokens: int) -> None:
    await agentrt.chat(_user(text), extra_body={"agentrt_output_tokens": output_tokens})


async def _turn(messages: list[dict[str, str]], text: str, output_tokens: int) -> None:
    """One ReAct-style turn: the conversation so far plus ``text``, answer appended."""
    messages.append({"role": "user", "content": text})
    reply = await agentrt.chat(messages, extra_body={"agentrt_output_tokens": output_tokens})
    messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})


async def record_run(out_dir: Path) -> RecordedRun:
    """Run a chain program (call, tool, call, tool, call; each call extends the conversation)
    and a fan-out program (plan, three
    parallel calls, a wait, a reduce call), and write their spans to ``out_dir``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "trace-export-test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    graphs: dict[str, ProgramGraph] = {}
    async with serve_engine(EmulatorConfig(time_scale=10.0)) as engine:
        config = RuntimeConfig(
            base_url=engine.openai_base_url,
            model=DEFAULT_MODEL_NAME,
            controller="off",
            tracer_provider=provider,
        )
        async with Runtime(config) as rt:
            async with rt.program("chain-0") as program:
                messages = _user("find the answer")[:1]
                await _turn(messages, "find the answer", 7)
                found = await search("the answer")
                await _turn(messages, f"observation: {found}; now look it up", 5)
                value = await lookup("answer")
                await _turn(messages, f"observation: {value}; final answer please", 9)
                assert program.graph is not None
                graphs["chain-0"] = program.graph
            async with rt.program("fanout-1") as program:
                await _chat("plan three steps", 11)
                await agentrt.gather(
                    lambda: _chat("step one", 3),
                    lambda: _chat("step two", 4),
                    lambda: _chat("step three", 6),
                )
                async with agentrt.wait("approval"):
                    await anyio.sleep(WAIT_S)
                await _chat("combine the steps", 8)
                assert program.graph is not None
                graphs["fanout-1"] = program.graph
    provider.force_flush()
    spans_file = out_dir / "spans.jsonl"
    finished = exporter.get_finished_spans()
    write_trace(spans_file, records_from_sdk(finished))
    otlp_file = out_dir / "otlp.json"
    otlp_file.write_text(MessageToJson(encode_spans(finished), indent=None) + "\n")
    provider.shutdown()
    return RecordedRun(spans_file, otlp_file, graphs)
