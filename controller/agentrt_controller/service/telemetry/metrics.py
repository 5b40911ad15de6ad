"""The controller's own Prometheus metrics: every name, type and label is in docs/controller.md
("Metrics")."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from agentrt import __version__
from agentrt_controller.scheduling.dispatcher import Admission
from agentrt_controller.service.telemetry.prometheus import Registry

__all__ = ["ServiceMetrics"]

_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
#: Call latencies (E2E, time to first token), seconds: vLLM's own range, milliseconds to minutes.
_CALL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
#: Whole programs, seconds: an agent program runs from seconds to an hour.
_PROGRAM_BUCKETS = (0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)
#: The states a backend can be in (the ``state`` label of ``backend_state``): taking calls
#: (``up``), its health probe failing (``down``), its circuit ``open`` or ``half_open``, or
#: being removed (``draining``).
BACKEND_STATES = ("up", "down", "half_open", "open", "draining")


class ServiceMetrics:
    """Counters updated per call; gauges filled at scrape time from live state."""

    def __init__(self) -> None:
        r = self.registry = Registry()
        p = "agentrt_controller_"
        r.info(
            "agentrt_build_info", "The running agentrt component and its version",
            {"component": "controller", "version": __version__},
        )  # fmt: skip
        self.requests = r.counter(
            p + "requests_total", "HTTP answers to OpenAI calls by endpoint and status",
            ("endpoint", "status"),
        )  # fmt: skip
        self.admissions = r.counter(
            p + "admissions_total", "Calls admitted to a backend", ("backend",)
        )
        self.queue_wait = r.histogram(
            p + "queue_wait_seconds", "Time a call spent in the controller's queues (seconds)",
            _WAIT_BUCKETS,
        )  # fmt: skip
        self.call_e2e = r.histogram(
            p + "call_e2e_seconds",
            "Generation calls from arrival at the controller to the answer's last byte (seconds)",
            _CALL_BUCKETS, ("endpoint",),
        )  # fmt: skip
        self.ttft = r.histogram(
            p + "time_to_first_token_seconds",
            "Streamed calls from arrival at the controller to their first token event (seconds)",
            _CALL_BUCKETS, ("endpoint",),
        )  # fmt: skip
        self.program_e2e = r.histogram(
            p + "program_e2e_seconds",
            "Programs from their first call or start event to their end (seconds); evicted "
            "programs are not counted",
            _PROGRAM_BUCKETS,
        )  # fmt: skip
        self.service_charged = r.counter(
            p + "service_charged_seconds_total", "Service charged by the cost model (seconds)"
        )
        self.output_tokens = r.counter(p + "output_tokens_total", "Output tokens proxied")
        self.uncached_prompt_tokens = r.counter(
            p + "uncached_prompt_tokens_total", "Prompt tokens not served from a prefix cache"
        )
        self.retries = r.counter(
            p + "retries_total", "Calls moved off a backend that could not be reached",
            ("backend",),
        )  # fmt: skip
        self.deadline_drops = r.counter(
            p + "deadline_drops_total", "Calls answered 504 because their deadline passed"
        )
        self.no_backend = r.counter(
            p + "no_backend_total", "Calls answered 503 because no backend was healthy"
        )
        self.overloaded = r.counter(
            p + "overloaded_total", "Calls answered 503 because max_queued_calls were queued"
        )
        self.client_disconnects = r.counter(
            p + "client_disconnects_total", "Calls whose client went away before the answer"
        )
        self.internal_errors = r.counter(
            p + "internal_errors_total", "Dispatch or probe rounds that failed (see the log)"
        )
        self.retention_errors = r.counter(
            p + "retention_errors_total",
            "Retention pins, unpins or re-warms a backend refused or did not answer (see the log)",
            ("action",),
        )
        self.queue_length = r.gauge(
            p + "queue_length", "Calls queued in the controller by queue level", ("level",)
        )
        self.promotions = r.counter(
            p + "promotions_total", "Anti-starvation promotions (from the scheduler)"
        )
        self._promotions_seen = 0.0
        self.in_flight = r.gauge(
            p + "in_flight_calls", "Calls admitted to a backend and not finished", ("backend",)
        )
        self.in_flight_sequences = r.gauge(
            p + "in_flight_sequences",
            "Sequences admitted to a backend and not finished (a call counts its n): what the "
            "admission window counts",
            ("backend",),
        )
        self.admission_window = r.gauge(
            p + "admission_window",
            "Sequences the admission policy lets a backend hold at once (+Inf: unlimited)",
            ("backend",),
        )
        self.admission_slow_start = r.gauge(
            p + "admission_slow_start",
            "1 while the adaptive admission window of the backend is in slow start (doubling)",
            ("backend",),
        )
        self.backend_up = r.gauge(p + "backend_up", "1 when the backend is healthy", ("backend",))
        self.backend_circuit = r.gauge(
            p + "backend_state",
            "1 for the backend's current state (up, down, half_open, open, draining), 0 for the "
            "others",
            ("backend", "state"),
        )
        self.backend_failures = r.counter(
            p + "backend_failures_total",
            "Calls that failed because of the backend (refused, broken connection, 5xx, timeout)",
            ("backend",),
        )
        self.backend_waiting = r.gauge(
            p + "backend_num_requests_waiting", "Scraped vllm:num_requests_waiting",
            ("backend",),
        )  # fmt: skip
        self.programs = r.gauge(p + "live_programs", "Live programs in the process table")
        # Per tenant (label ``tenant``; ``""`` for a request whose key matched no tenant).
        self.tenant_calls = r.counter(
            p + "tenant_calls_total", "Generation calls accepted, by tenant", ("tenant",)
        )
        self.tenant_tokens = r.counter(
            p + "tenant_tokens_total", "Tokens charged by tenant and kind (prompt, output)",
            ("tenant", "kind"),
        )  # fmt: skip
        self.tenant_service = r.counter(
            p + "tenant_service_charged_seconds_total",
            "Service charged by the cost model, by tenant (seconds)",
            ("tenant",),
        )
        self.tenant_refusals = r.counter(
            p + "tenant_refusals_total",
            "Requests refused by tenant and status (401 no key, 404 not the tenant's, 429 over "
            "quota)",
            ("tenant", "status"),
        )
        self.tenant_programs = r.gauge(
            p + "tenant_live_programs", "Live programs in the process table by tenant", ("tenant",)
        )
        self.evictions = r.counter(
            p + "program_evictions_total", "Idle programs evicted because the table was full"
        )

    def admitted(self, admission: Admission, now_s: float) -> None:
        self.admissions.inc(1.0, admission.backend_id)
        self.queue_wait.observe(max(0.0, now_s - admission.call.facts.arrival_s))

    def on_collect(self, collector: Callable[[], None]) -> None:
        self.registry.on_collect(collector)

    def fill_queues(self, snapshot: Mapping[str, object]) -> None:
        """Queue gauges from a scheduler snapshot ``{"queues": [{"level", "calls"}...]}``
        (what is not in that shape is left out)."""
        lengths: dict[tuple[str, ...], float] = {}
        queues = snapshot.get("queues", [])
        for queue in queues if isinstance(queues, list) else ():
            if not isinstance(queue, Mapping):
                continue
            calls = queue.get("calls", queue.get("length", 0))
            length = len(calls) if isinstance(calls, list) else calls
            lengths[(str(queue.get("level", 0)),)] = float(length)
        self.queue_length.replace(lengths)
        promotions = snapshot.get("promotions_total")  # multi-level schedulers say it
        if isinstance(promotions, int | float) and promotions > self._promotions_seen:
            self.promotions.inc(float(promotions) - self._promotions_seen)
            self._promotions_seen = float(promotions)

    def render(self) -> str:
        return self.registry.render()
