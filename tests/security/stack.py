"""Real servers for the security tests: an emulator and a controller in front of it, on
loopback ports, run by an event loop in a background thread (so that synchronous tests and
hypothesis can drive them), plus a capture of every log record they write."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from anyio.from_thread import start_blocking_portal

from agentrt_controller.backends.spec import BackendSpec
from agentrt_controller.service import ControllerApp, ControllerConfig, serve_controller
from agentrt_emulator.core.types import EngineConfig
from agentrt_emulator.server import EmulatorConfig, RunningEmulator, serve_engine

MODEL = "agentrt/emulated-llama-3.1-8b"


class LogCapture(logging.Handler):
    """Every record at WARNING or above, from any logger, while installed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self._lock_records = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock_records:
            self.records.append(record)

    def tracebacks(self) -> list[str]:
        """The records that carry a traceback or are errors, formatted (empty when clean)."""
        formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
        with self._lock_records:
            bad = [r for r in self.records if r.exc_info or r.levelno >= logging.ERROR]
            out = []
            for record in bad:
                text = formatter.format(record)
                if record.exc_info:
                    text += "\n" + formatter.formatException(record.exc_info)
                out.append(text)
            return out

    def clear(self) -> None:
        with self._lock_records:
            self.records.clear()


@contextlib.contextmanager
def captured_logs() -> Iterator[LogCapture]:
    """Install a :class:`LogCapture` on the root logger (uvicorn's loggers propagate)."""
    capture = LogCapture()
    root = logging.getLogger()
    root.addHandler(capture)
    try:
        yield capture
    finally:
        root.removeHandler(capture)


@dataclass
class Stack:
    """A running emulator and a controller in front of it."""

    engine: RunningEmulator
    controller_url: str
    controller: ControllerApp
    logs: LogCapture
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def engine_url(self) -> str:
        return self.engine.base_url


def emulator_config(**options: Any) -> EmulatorConfig:
    """A fast emulator with a small KV cache; ``options`` are :class:`EmulatorConfig` fields
    (``engine`` replaces the small-cache :class:`EngineConfig`)."""
    options.setdefault("time_scale", 1000.0)
    options.setdefault("engine", EngineConfig(num_gpu_blocks=4096))
    return EmulatorConfig(**options)


@contextlib.contextmanager
def threaded_stack(
    engine_options: dict[str, Any] | None = None, **controller_options: Any
) -> Iterator[Stack]:
    """An emulator (``engine_options``) and a controller in front (``controller_options``:
    :class:`ControllerConfig` fields), served from a background thread's event loop."""
    apps: list[ControllerApp] = []
    engine_config = emulator_config(**(engine_options or {}))
    options = {"scrape_interval_s": 0.5, **controller_options}

    # Two event loops (threads), as two processes would have: a stall of one server's loop
    # shows in its own figures only.
    with (
        captured_logs() as logs,
        start_blocking_portal() as engine_portal,
        engine_portal.wrap_async_context_manager(serve_engine(engine_config)) as engine,
        start_blocking_portal() as controller_portal,
    ):
        backend = BackendSpec.parse(engine.base_url + ",kind=emulator")
        config = ControllerConfig(port=0, backends=(backend,), **options)
        serving = serve_controller(config, on_app=apps.append)
        with controller_portal.wrap_async_context_manager(serving) as url:
            yield Stack(engine, url, apps[0], logs, dict(controller_options))
