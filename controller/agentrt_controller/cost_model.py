"""The service charged to a call: an estimate of engine execution time from the work done.

Autellix (arXiv 2502.13965) measures attained service inside the engine. A proxy sees only
wall time, which includes the backend's own queueing — charging that would punish a program for
*waiting*. So the controller charges the work the call made the engine do::

    service_s = a * uncached_prompt_tokens + b * generated_tokens + c

* ``a`` = ``prefill_s_per_token`` — seconds per prompt token that had to be prefilled, i.e.
  ``prompt_tokens - cached_prompt_tokens`` (from the backend's
  ``usage.prompt_tokens_details.cached_tokens``; when the backend does not report it, every
  prompt token is charged as uncached — an upper bound);
* ``b`` = ``decode_s_per_token`` — seconds per generated (output) token: the time of one decode
  step, which every running call of a batch spends whole (execution time, as the engine would
  count it, not a 1/batch share);
* ``c`` = ``per_call_s`` — fixed seconds per call (scheduling, sampling, detokenisation).

Nothing else is charged: not the time queued at the controller or in the backend, not network
time, not tool time. The parameters are calibratable: pass them, take a hardware/model profile
(:meth:`CostModel.from_profile`), or fit them to measurements (:meth:`CostModel.calibrate`).
Parse a config table once (:meth:`CostModel.from_mapping`) and pass the model on: the
controller's policy builders and charger and the simulator all read the same object.
Pure arithmetic: no clock, no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from agentrt.errors import ConfigError
from agentrt_controller.config_check import SECTION, check_fields, parse_section
from agentrt_serving.hardware import PROFILES

__all__ = ["CostFunction", "CostModel", "CostSample"]

#: What charges a finished call: ``(uncached_prompt_tokens, generated_tokens) -> seconds`` of
#: service, >= 0. :meth:`CostModel.service_s` is one (its ``cached_prompt_tokens`` defaults to
#: 0, so its first argument is then the uncached prompt); the controller's charger and the
#: simulator both take this type, the simulator also its engine profile's roofline.
CostFunction = Callable[[int, int], float]


@dataclass(frozen=True, slots=True)
class CostSample:
    """One measured call for :meth:`CostModel.calibrate`."""

    uncached_prompt_tokens: int
    generated_tokens: int
    #: Engine execution time observed for the call (seconds), e.g. from the engine's own
    #: metrics or a benchmark with an otherwise idle engine — never including queueing.
    observed_exec_s: float


#: Seconds (per token or per call): finite, >= 0.
_Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]


@dataclass(frozen=True, slots=True)
class _ProfileCost:
    """The ``cost`` section in its ``profile`` form (:meth:`CostModel.from_profile`'s
    arguments)."""

    __pydantic_config__ = SECTION

    profile: str
    prefill_efficiency: float = 0.5
    nominal_batch: int = 16
    nominal_context_tokens: int = 1024
    per_call_s: float = 0.0

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, slots=True)
class CostModel:
    """``service_s = a * uncached_prompt_tokens + b * generated_tokens + c`` (module doc);
    the ``cost`` config section."""

    __pydantic_config__ = SECTION

    #: ``a``: seconds per uncached (prefilled) prompt token, >= 0.
    prefill_s_per_token: _Rate = 1.0e-4
    #: ``b``: seconds per generated token (one decode step), >= 0.
    decode_s_per_token: _Rate = 1.0e-2
    #: ``c``: seconds per call, >= 0.
    per_call_s: _Rate = 0.0
    #: The hardware profile the rates were derived from (:meth:`from_profile`); ``None`` =
    #: given as rates. Retention reads a KV CPU tier's reload cost from it
    #: (docs/routing.md, "Where M and the tier come from"); no charge depends on it.
    profile: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        check_fields(self)

    def service_s(
        self, prompt_tokens: int, generated_tokens: int, cached_prompt_tokens: int = 0
    ) -> float:
        """Seconds of service for a call that read ``prompt_tokens`` (of which
        ``cached_prompt_tokens`` came from the prefix cache) and generated
        ``generated_tokens``. Negative or inconsistent counts are clamped to 0."""
        uncached = max(0, prompt_tokens - max(0, cached_prompt_tokens))
        return (
            self.prefill_s_per_token * uncached
            + self.decode_s_per_token * max(0, generated_tokens)
            + self.per_call_s
        )

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], path: str = "cost") -> CostModel:
        """From a config table: the three field names, or ``profile`` plus
        :meth:`from_profile`'s keyword arguments; ``path`` names the table in messages.
        Unknown keys and bad values raise :class:`ConfigError`."""
        if isinstance(values, Mapping) and "profile" in values:
            spec = parse_section(_ProfileCost, values, path)
            return cls.from_profile(
                spec.profile,
                prefill_efficiency=spec.prefill_efficiency,
                nominal_batch=spec.nominal_batch,
                nominal_context_tokens=spec.nominal_context_tokens,
                per_call_s=spec.per_call_s,
            )
        return parse_section(cls, values, path)

    @classmethod
    def from_profile(
        cls,
        profile: str = "a100-llama3-8b",
        *,
        prefill_efficiency: float = 0.5,
        nominal_batch: int = 16,
        nominal_context_tokens: int = 1024,
        per_call_s: float = 0.0,
    ) -> CostModel:
        """Roofline estimate from a hardware profile (:data:`agentrt_serving.hardware.PROFILES`,
        the same constants the engine emulator's step-time model reads).

        * prefill is compute-bound: ``a = 2 * params / (peak_flops * prefill_efficiency)``;
        * a decode step is bandwidth-bound: it reads the weights once and the KV of the whole
          batch, ``b = (weight_bytes + nominal_batch * nominal_context_tokens *
          kv_bytes_per_token) / mem_bytes_per_s``.

        For ``a100-llama3-8b`` with the defaults: ``a ≈ 1.03e-4 s`` (about 9,750 prefill
        tokens/s) and ``b ≈ 9.1e-3 s`` per decode step (16 GB + 16 x 1024 x 128 KiB = 18.1 GB
        at 2.0 TB/s).
        """
        hw = PROFILES.get(profile)
        if hw is None:
            raise ConfigError(f"unknown cost profile {profile!r}; valid: {', '.join(PROFILES)}")
        if not 0 < prefill_efficiency <= 1:
            raise ConfigError(f"prefill_efficiency must be in (0, 1], got {prefill_efficiency}")
        if nominal_batch < 1 or nominal_context_tokens < 0:
            raise ConfigError("nominal_batch must be >= 1 and nominal_context_tokens >= 0")
        kv_bytes = nominal_batch * nominal_context_tokens * hw.kv_bytes_per_token
        return cls(
            prefill_s_per_token=2 * hw.params / (hw.peak_flops * prefill_efficiency),
            decode_s_per_token=(hw.weight_bytes + kv_bytes) / hw.mem_bytes_per_s,
            per_call_s=per_call_s,
            profile=profile,
        )

    @classmethod
    def calibrate(cls, samples: Sequence[CostSample]) -> CostModel:
        """Least-squares fit of ``a, b, c >= 0`` to measured calls.

        Minimises ``Σ (a*u + b*g + c - observed)^2`` subject to non-negativity by solving the
        normal equations on every subset of the three coefficients (the rest held at 0) and
        keeping the best feasible solution — exact for three unknowns. Raises
        :class:`ConfigError` with fewer than 3 samples or when no subset is identifiable.
        """
        if len(samples) < 3:
            raise ConfigError(f"calibration needs at least 3 samples, got {len(samples)}")
        rows = [
            ((float(s.uncached_prompt_tokens), float(s.generated_tokens), 1.0), s.observed_exec_s)
            for s in samples
        ]
        best: tuple[float, tuple[float, float, float]] | None = None
        for size in (3, 2, 1):
            for subset in itertools.combinations(range(3), size):
                coef = _least_squares(rows, subset)
                if coef is None or any(c < 0 for c in coef):
                    continue
                full = [0.0, 0.0, 0.0]
                for index, value in zip(subset, coef, strict=True):
                    full[index] = value
                residual = sum(
                    (sum(f * x for f, x in zip(full, xs, strict=True)) - y) ** 2 for xs, y in rows
                )
                if best is None or residual < best[0] - 1e-18:
                    best = (residual, (full[0], full[1], full[2]))
        if best is None:
            raise ConfigError("calibration samples do not determine a non-negative cost model")
        a, b, c = best[1]
        return cls(prefill_s_per_token=a, decode_s_per_token=b, per_call_s=c)


def _least_squares(
    rows: Sequence[tuple[tuple[float, float, float], float]], subset: tuple[int, ...]
) -> list[float] | None:
    """Solve the normal equations for the columns in ``subset``; ``None`` if singular."""
    n = len(subset)
    matrix = [[0.0] * (n + 1) for _ in range(n)]
    for xs, y in rows:
        cols = [xs[i] for i in subset]
        for i in range(n):
            for j in range(n):
                matrix[i][j] += cols[i] * cols[j]
            matrix[i][n] += cols[i] * y
    # Gauss-Jordan elimination with partial pivoting.
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(matrix[r][col]))
        scale = max(abs(matrix[r][c]) for r in range(n) for c in range(n)) or 1.0
        if abs(matrix[pivot][col]) <= 1e-12 * scale:
            return None
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        for r in range(n):
            if r != col:
                factor = matrix[r][col] / matrix[col][col]
                for c in range(col, n + 1):
                    matrix[r][c] -= factor * matrix[col][c]
    return [matrix[i][n] / matrix[i][i] for i in range(n)]
