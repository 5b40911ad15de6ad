"""The admission window, declared once: how many calls the controller lets into one backend at
a time (docs/scheduling.md, "Admission"). The controller's config, its command line, the
simulator's policy spec and the demo's settings all hold this type.

It lives apart from ``service/config.py`` so that a policy, the simulator or the demo can name
it without importing the service layer. Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal

from agentrt.errors import ConfigError

__all__ = ["AdmissionWindow", "parse_admission_window", "window_label"]

#: Calls in flight per backend: an integer >= 1, ``"adaptive"`` (sized from the backend's
#: batch and waiting queue, ``scheduling/admission.py``), or ``None`` = unlimited.
AdmissionWindow = int | None | Literal["adaptive"]

#: Spellings of ``None`` (unlimited) in text (any case).
_UNLIMITED = ("unlimited", "none", "inf")


def parse_admission_window(value: object, *, name: str = "admission_window") -> AdmissionWindow:
    """``value`` as an :data:`AdmissionWindow`: an integer (or its digits), ``"adaptive"``,
    ``None`` or ``"unlimited"`` / ``"none"`` / ``"inf"`` (any case; both meaning unlimited).
    The range (>= 1) is the holder's to check.

    Raises:
        ConfigError: anything else, naming ``name`` (the key or option the value came from).
    """
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if value == "adaptive":
        return "adaptive"
    if isinstance(value, str):
        if value.strip().lower() in _UNLIMITED:
            return None
        try:
            return int(value)
        except ValueError:
            pass
    raise ConfigError(f"{name} must be N, adaptive or unlimited, got {value!r}")


def window_label(window: AdmissionWindow) -> str:
    """How a window is printed: ``"8"``, ``"adaptive"`` or ``"unlimited"``."""
    return "unlimited" if window is None else str(window)
