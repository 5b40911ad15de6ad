"""In-memory tool-duration history: an exponentially weighted moving average per tool.

Used to predict a tool wait's duration for the controller when no journal (which keeps a
durable history) is configured.
"""

from __future__ import annotations

__all__ = ["ToolHistory"]


class ToolHistory:
    """EWMA of observed durations (seconds) per tool name; pure, no clock."""

    def __init__(self, alpha: float = 0.3) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self._alpha = alpha
        self._mean_s: dict[str, float] = {}

    def record(self, tool_name: str, duration_s: float) -> None:
        previous = self._mean_s.get(tool_name)
        if previous is None:
            self._mean_s[tool_name] = duration_s
        else:
            self._mean_s[tool_name] = previous + self._alpha * (duration_s - previous)

    def predict(self, tool_name: str) -> float | None:
        """Predicted duration (seconds) of the next run; None without history."""
        return self._mean_s.get(tool_name)
