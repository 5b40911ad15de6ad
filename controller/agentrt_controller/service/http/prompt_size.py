"""How many tokens a call's prompt holds before its backend says (docs/scheduling.md,
"Admission under memory pressure": the memory rule counts contexts in tokens).

The controller does not tokenize a call on its way in (that would cost a tokenizer pass, or a
backend round trip, per call). It estimates: the body's size over four — the bytes of its JSON,
or for the Responses API the characters of its text — about four characters of English per
token. That is off by whatever the text and the JSON around it are: on `bench replay`'s
prompts (short filler words, ~5 characters per token) the estimate was 1.26 × what the engine
counted, so the memory rule held contexts a quarter larger than they were.

:class:`PromptSizer` corrects the estimate per model with what the backends' usage reported
for the calls before: the ratio of exponentially weighted means of the reported prompt tokens
and of the estimate's units, so large prompts (where the error costs memory) weigh most.
Until a model's first report the factor is 1 (the bare estimate). Pure: no clock, no I/O.
"""

from __future__ import annotations

from agentrt.errors import ConfigError

__all__ = ["PromptSizer", "prompt_units"]

#: Characters (JSON bytes, or text characters) per token of the uncorrected estimate.
CHARS_PER_TOKEN = 4
#: The learned factor stays within this range: one odd body (an image's base64, a prompt of
#: token ids) must not make every estimate absurd.
_MIN_FACTOR, _MAX_FACTOR = 0.1, 10.0
#: Models remembered at most (a controller serves a few; a bound against unknown names).
_MAX_MODELS = 256


def prompt_units(size: int) -> int:
    """The uncorrected estimate (tokens) of a prompt of ``size`` characters."""
    return size // CHARS_PER_TOKEN


class PromptSizer:
    """Per model, the factor that turns :func:`prompt_units` into the backend's token count."""

    __slots__ = ("_means", "weight")

    def __init__(self, *, weight: float = 0.05) -> None:
        """``weight``: the share of each new report in the means, in (0, 1]."""
        if not 0 < weight <= 1:
            raise ConfigError(f"weight must be in (0, 1], got {weight!r}")
        self.weight = float(weight)
        #: model -> [mean reported tokens, mean estimated units, factor].
        self._means: dict[str, list[float]] = {}

    def factor(self, model: str) -> float:
        """Reported tokens per estimated unit for ``model`` (1.0 before its first report)."""
        means = self._means.get(model)
        return 1.0 if means is None else means[2]

    def tokens(self, model: str, units: int) -> int:
        """The corrected estimate of a prompt of ``units`` (:func:`prompt_units`)."""
        means = self._means.get(model)
        return units if means is None else int(units * means[2])

    def observe(self, model: str, units: int, reported_tokens: int) -> None:
        """A backend reported ``reported_tokens`` for a prompt estimated at ``units``
        (ignored when either is not positive)."""
        if units <= 0 or reported_tokens <= 0:
            return
        means = self._means.get(model)
        if means is None:
            if len(self._means) >= _MAX_MODELS:
                self._means.pop(next(iter(self._means)))
            means = self._means[model] = [float(reported_tokens), float(units), 1.0]
        else:
            weight = self.weight
            means[0] += weight * (reported_tokens - means[0])
            means[1] += weight * (units - means[1])
        means[2] = min(_MAX_FACTOR, max(_MIN_FACTOR, means[0] / means[1]))

    def snapshot(self) -> dict[str, float]:
        """model -> its factor now (introspection)."""
        return {model: means[2] for model, means in self._means.items()}
