"""Replay a trace's programs as real SDK programs against an OpenAI-compatible server.

Each trace program becomes one ``rt.program(kind, program_id=<trace id>)`` that starts
``arrival_s / time_scale`` wall seconds after the run's start. Inside it every trace thread
runs as one SDK thread (``agentrt.parallel``; ``main`` is the program's own), and every node
as a task of its thread that starts when all its parents have finished:

* an LLM node streams one chat completion through the runtime's tagged HTTP client
  (``agentrt_sim.replay.stream`` says why not the ``openai`` one; either way the
  server sees ``X-Agentrt-Program-Id`` / ``-Thread-Id`` / ``-Node-Id``), with the prompt from
  :class:`~agentrt_sim.replay.prompts.PromptBuilder`, ``max_tokens = output_tokens`` and,
  where the server accepts it, ``ignore_eos`` (so it generates exactly that many tokens).
  A call whose stream was cut, whose connection failed or that was answered 502 / 503 is
  re-sent up to ``max_retries`` times after a doubling backoff, as an agent
  framework re-sends a failed call (the ``openai`` client's ``max_retries``); only a whole
  answer is used, so nothing of a cut attempt reaches the program;
* a wait node sleeps ``duration_s / time_scale`` inside ``agentrt.wait`` (``tool`` or
  ``human``), which reports it to a controller with its name and a predicted duration: the
  median of that name's recent finished waits, the SDK's one duration predictor
  (:class:`agentrt.tools.durations.DurationHistory`), in wall seconds as every client counts
  them (a controller in front of emulators at a time scale turns them into its model seconds
  itself, ``controller serve --time-scale``).

Times are recorded in wall seconds since the start; :mod:`agentrt_sim.replay.summary`
multiplies them by the time scale into model seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import httpx

import agentrt
from agentrt.errors import ConfigError, LLMCallError
from agentrt.tools.durations import DurationHistory
from agentrt_sim.replay.prompts import PromptBuilder, TemplateCosts
from agentrt_sim.replay.records import CallRecord, NodeSpan, ProgramResult, ReplayResult
from agentrt_sim.replay.server import (
    ReplayError,
    accepts_ignore_eos,
    calibrate,
    check_base_url,
    check_time_scale,
    counters,
    discover_model,
    max_model_len,
    scrape_counters,
    scrape_metrics,
)
from agentrt_sim.replay.stream import StreamedChat, resendable, stream_chat
from agentrt_sim.workloads.program import LLMNode, Node, Program, WaitNode

__all__ = [
    "HEADER_REPLAY_NODE",
    "MAX_BACKOFF_S",
    "ReplayConfig",
    "ServerFacts",
    "check_lengths",
    "describe_error",
    "probe",
    "replay",
]

#: Request header naming the trace node a call replays (for correlating server-side logs).
HEADER_REPLAY_NODE = "X-Agentrt-Replay-Node"

#: Longest wait before a re-send (wall seconds).
MAX_BACKOFF_S = 2.0

#: ``progress(programs_done, programs_total)``.
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """How to replay. Raises :class:`ConfigError` for bad values at construction."""

    #: OpenAI base URL of the server, ending in ``/v1``.
    base_url: str
    #: Model to call; ``None`` = the first of ``GET /v1/models``.
    model: str | None = None
    #: Trace seconds per wall second: arrivals and waits run this many times faster, to match
    #: an emulator started with the same ``--time-scale``; results are reported × this.
    time_scale: float = 1.0
    #: Bearer token sent on every request: the probe, the calls, the metrics scrapes.
    api_key: str = "EMPTY"
    #: Server root whose ``/tokenize`` sizes the prompts (default: the base URL's root; a
    #: controller has none, so point this at one of its engines).
    tokenize_url: str | None = None
    #: Server root whose ``/metrics`` gives prefix-cache and preemption counters (default:
    #: the base URL's root).
    metrics_url: str | None = None
    #: The SDK's controller mode (docs/sdk.md): ``auto`` reports tool waits when a controller
    #: answers at the base URL.
    controller: Literal["auto", "required", "off"] = "auto"
    #: Timeout of one call (wall seconds).
    request_timeout_s: float = 600.0
    #: Re-sends of a call after a cut stream, a failed connection or a 502 / 503
    #: (``agentrt_sim.replay.stream.resendable``); 0 = a failed call ends its program.
    max_retries: int = 2
    #: Wall seconds before the first re-send of a call; each further one waits twice as long
    #: (at most :data:`MAX_BACKOFF_S`).
    retry_backoff_s: float = 0.1
    #: Other routers' program hints the calls carry (``agentrt.RuntimeConfig.peer_hints``).
    peer_hints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.time_scale > 0 and math.isfinite(self.time_scale)):
            raise ConfigError(f"--time-scale must be a number > 0, got {self.time_scale}")
        if not self.request_timeout_s > 0:
            raise ConfigError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.max_retries < 0:
            raise ConfigError(f"--max-retries must be >= 0, got {self.max_retries}")
        if not (self.retry_backoff_s >= 0 and math.isfinite(self.retry_backoff_s)):
            raise ConfigError(f"retry_backoff_s must be >= 0, got {self.retry_backoff_s}")
        check_base_url(self.base_url)


@dataclass(frozen=True, slots=True)
class ServerFacts:
    """What :func:`probe` learned about the server."""

    model: str
    #: Server root (the base URL without ``/v1``).
    root: str
    costs: TemplateCosts
    #: Whether calls carry ``ignore_eos``.
    ignore_eos: bool
    #: Where calls go: ``{base_url}/chat/completions``.
    chat_url: str
    #: Longest prompt + output the server takes (tokens); None = it does not say.
    max_model_len: int | None = None


async def probe(config: ReplayConfig, http: httpx.AsyncClient) -> ServerFacts:
    """Check the server: the model, the template's costs, ``ignore_eos`` support.

    Raises :class:`~agentrt_sim.replay.server.ReplayError` naming the URL it could not use.
    """
    root = check_base_url(config.base_url)
    model = config.model or await discover_model(http, config.base_url)
    tokenize_root = (config.tokenize_url or root).rstrip("/")
    costs = await calibrate(http, tokenize_root, model)
    ignore_eos = await accepts_ignore_eos(http, config.base_url, model)
    chat_url = config.base_url.rstrip("/") + "/chat/completions"
    limit = await max_model_len(http, config.base_url, tokenize_root, model)
    return ServerFacts(model, root, costs, ignore_eos, chat_url, limit)


def check_lengths(programs: Sequence[Program], limit: int | None) -> None:
    """Refuse a trace with a call longer than the server's ``max_model_len`` (``limit``
    tokens; None = unknown, nothing checked), before any program starts: the server would
    answer it 400 in the middle of the run and fail its program. Coding and research traces
    reach 85 K-180 K tokens per call, beyond the emulator's default 32,768.

    Raises :class:`ReplayError` naming the longest call and what would fit.
    """
    if limit is None:
        return
    longest: tuple[int, str, str, int, int] | None = None
    for program in programs:
        calls = [node for node in program.nodes if isinstance(node, LLMNode)]
        for node, prompt in zip(calls, program.call_prompt_tokens(), strict=True):
            total = prompt + node.output_tokens
            if longest is None or total > longest[0]:
                longest = (total, program.program_id, node.node_id, prompt, node.output_tokens)
    if longest is not None and longest[0] > limit:
        total, program_id, node_id, prompt, output = longest
        raise ReplayError(
            f"program {program_id!r}, call {node_id!r}: {prompt} prompt + {output} output "
            f"tokens exceed the server's max_model_len {limit}; start the engine with "
            f"--max-model-len {total} or more, or replay a trace with smaller contexts"
        )


class _ProgramRun:
    """One program's replay: its node tasks, its prompt builder, its records."""

    def __init__(
        self,
        rt: agentrt.Runtime,
        http: httpx.AsyncClient,
        program: Program,
        facts: ServerFacts,
        config: ReplayConfig,
        zero_s: float,
        history: DurationHistory,
    ) -> None:
        self._rt = rt
        self._http = http
        self._url = facts.chat_url
        self._facts = facts
        self._config = config
        self._zero_s = zero_s
        self._history = history
        self._builder = PromptBuilder(program, facts.costs)
        self._done = {node.node_id: anyio.Event() for node in program.nodes}
        self.result = ProgramResult(program)

    def _now(self) -> float:
        return anyio.current_time() - self._zero_s

    async def run(self) -> ProgramResult:
        program = self.result.program
        await anyio.sleep_until(self._zero_s + program.arrival_s / self._config.time_scale)
        self.result.start_s = self._now()
        threads: dict[str, list[Node]] = {}
        for node in program.nodes:
            threads.setdefault(node.thread_id, []).append(node)
        try:
            async with (
                self._rt.program(program.kind, program_id=program.program_id),
                agentrt.parallel() as par,
            ):
                for thread_id, nodes in threads.items():
                    if thread_id != "main":
                        self.result.threads[thread_id] = par.start(self._thread, nodes).thread_id
                if "main" in threads:
                    self.result.threads["main"] = "main"
                    await self._thread(threads["main"])
        except Exception as exc:  # a failed program is a result; cancellation still propagates
            self.result.error = describe_error(exc)
            return self.result
        self.result.finish_s = max(span.finish_s for span in self.result.spans.values())
        return self.result

    async def _thread(self, nodes: Sequence[Node]) -> None:
        # Nodes of one thread may run at once (siblings whose parents are done): one task each.
        async with anyio.create_task_group() as group:
            for node in nodes:
                group.start_soon(self._node, node)

    async def _node(self, node: Node) -> None:
        for parent in node.parents:
            await self._done[parent].wait()
        spans = self.result.spans
        release = max((spans[p].finish_s for p in node.parents), default=self.result.start_s)
        span = spans[node.node_id] = NodeSpan(release)
        if isinstance(node, LLMNode):
            await self._call(node, span, self.result.threads[node.thread_id])
        else:
            await self._wait(node)
        span.finish_s = self._now()
        self._done[node.node_id].set()

    async def _call(self, node: LLMNode, span: NodeSpan, sdk_thread: str) -> None:
        prompt = self._builder.prompt(node.node_id)
        record = self.result.calls[node.node_id] = CallRecord(
            node.node_id,
            sdk_thread,
            span,
            trace_prompt_tokens=prompt.trace_prompt_tokens,
            expected_prompt_tokens=prompt.expected_prompt_tokens,
            max_tokens=node.output_tokens,
        )
        body: dict[str, Any] = {
            "model": self._facts.model,
            "messages": prompt.messages,
            "max_tokens": node.output_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self._facts.ignore_eos:
            body["ignore_eos"] = True

        answer = await self._send(node.node_id, body, record)
        record.prompt_tokens = answer.prompt_tokens
        record.output_tokens = answer.completion_tokens
        record.cached_tokens = answer.cached_tokens
        record.controller_queue_s = answer.controller_queue_s
        generated = record.output_tokens if record.output_tokens is not None else node.output_tokens
        self._builder.record_output(node.node_id, answer.text, generated)

    async def _send(self, node_id: str, body: dict[str, Any], record: CallRecord) -> StreamedChat:
        """The call's answer, re-sent while :func:`resendable` says a re-send may help, at
        most ``max_retries`` times; counts re-sends in ``record.resent``.

        Raises the first :class:`LLMCallError` that is not resendable as it is, and one that
        names the attempts when the last allowed attempt failed too.
        """

        def first_token() -> None:
            record.first_token_s = self._now()

        while True:
            record.first_token_s = math.nan  # a cut attempt's first token is not the answer's
            try:
                return await stream_chat(
                    self._http,
                    self._url,
                    body,
                    headers={HEADER_REPLAY_NODE: node_id},
                    on_first_token=first_token,
                )
            except LLMCallError as exc:
                if not resendable(exc):
                    raise
                if record.resent >= self._config.max_retries:
                    if not record.resent:
                        raise
                    raise LLMCallError(
                        f"call {node_id} failed {record.resent + 1} times (--max-retries "
                        f"{self._config.max_retries}); the last time: {exc}",
                        status_code=exc.status_code,
                    ) from exc
            record.resent += 1
            backoff_s = self._config.retry_backoff_s * 2 ** (record.resent - 1)
            await anyio.sleep(min(backoff_s, MAX_BACKOFF_S))

    async def _wait(self, node: WaitNode) -> None:
        predicted = self._history.predict(node.name)
        kind: Literal["tool", "human"] = "tool" if node.kind == "tool" else "human"
        started = anyio.current_time()
        async with agentrt.wait(node.name, kind=kind, predicted_s=predicted):
            # Until a deadline, not for a duration: the wait's tool-start event to a
            # controller is part of the wait (its round trip would otherwise be added to
            # every wait, x time scale).
            await anyio.sleep_until(started + node.duration_s / self._config.time_scale)
        self._history.record(node.name, anyio.current_time() - started)
        self._builder.record_wait(node.node_id)


def describe_error(exc: BaseException) -> str:
    """``"<type>: <message>"`` of the error that failed a program: for an exception group
    (a task group's), its first leaf error, with how many other errors it held."""
    leaves: list[BaseException] = []

    def collect(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                collect(inner)
        else:
            leaves.append(error)

    collect(exc)
    first = leaves[0]
    text = f"{type(first).__name__}: {first}"
    if len(leaves) > 1:
        text += f" (and {len(leaves) - 1} more error{'s' if len(leaves) > 2 else ''})"
    return text


async def replay(
    programs: Sequence[Program],
    config: ReplayConfig,
    *,
    progress: Progress | None = None,
) -> tuple[ReplayResult, ServerFacts]:
    """Run ``programs`` against ``config.base_url``; returns the records and the probe.

    Raises :class:`~agentrt_sim.replay.server.ReplayError` when the server cannot be used or a
    call is longer than its ``max_model_len`` (before any program starts). Failed programs
    are recorded (``ProgramResult.error``), not raised.
    """
    metrics_root = (config.metrics_url or check_base_url(config.base_url)).rstrip("/")
    auth = {"authorization": f"Bearer {config.api_key}"}
    async with httpx.AsyncClient(timeout=30.0, headers=auth) as http:
        facts = await probe(config, http)
        check_lengths(programs, facts.max_model_len)
        runtime_config = agentrt.RuntimeConfig(
            base_url=config.base_url,
            api_key=config.api_key,
            model=facts.model,
            controller=config.controller,
            request_timeout_s=config.request_timeout_s,
            # The replay re-sends its own streamed calls (``_ProgramRun._send``); this is the
            # same bound for any call made through the runtime's ``openai`` client.
            max_retries=config.max_retries,
            peer_hints=config.peer_hints,
        )
        metrics = await scrape_metrics(http, metrics_root)
        check_time_scale(metrics, config.time_scale, metrics_root)
        before = counters(metrics)
        history = DurationHistory()
        done = 0
        async with agentrt.Runtime(runtime_config) as rt:
            client = rt.http_client(
                timeout=httpx.Timeout(config.request_timeout_s, connect=10.0), headers=auth
            )
            zero_s = anyio.current_time()
            runs = [_ProgramRun(rt, client, p, facts, config, zero_s, history) for p in programs]

            async def run_one(run: _ProgramRun) -> None:
                nonlocal done
                await run.run()
                done += 1
                if progress is not None:
                    progress(done, len(runs))

            async with anyio.create_task_group() as group:
                for run in runs:
                    group.start_soon(run_one, run)
            wall_s = anyio.current_time() - zero_s
            await client.aclose()
        after = await scrape_counters(http, metrics_root)
    result = ReplayResult([r.result for r in runs], wall_s, before, after)
    return result, facts
