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
Until a model's first report the factor is 1 (the bare estimate). The same factor sizes the
elements of a call's prefix chain, which are cut over text (``DEFAULT_BLOCK_TOKENS`` units of
the estimate each: ``CallFacts.block_tokens``), so the prefixes the memory rule counts once are
in the backend's tokens too. Pure: no clock, no I/O.
"""

from __future__ import annotations

from agentrt_controller.retention.recent import RecentMeans
from agentrt_controller.routing.hashing import DEFAULT_CHARS_PER_TOKEN

__all__ = ["PromptSizer", "prompt_units"]

#: The learned factor stays within this range: one odd body (an image's base64, a prompt of
#: token ids) must not make every estimate absurd.
_MIN_FACTOR, _MAX_FACTOR = 0.1, 10.0


def prompt_units(size: int) -> int:
    """The uncorrected estimate (tokens) of a prompt of ``size`` characters: as many as the
    text prefix chains count (``routing/hashing.py``, four characters per token)."""
    return size // DEFAULT_CHARS_PER_TOKEN


class PromptSizer:
    """Per model, the factor that turns :func:`prompt_units` into the backend's token count."""

    __slots__ = ("_reported", "_units")

    def __init__(self, *, weight: float = 0.05) -> None:
        """``weight``: the share of each new report in the means, in (0, 1]."""
        #: Per model, the recent mean of the reported prompt tokens and of the estimates.
        self._reported = RecentMeans(weight=weight)
        self._units = RecentMeans(weight=weight)

    def factor(self, model: str) -> float:
        """Reported tokens per estimated unit for ``model`` (1.0 before its first report)."""
        units = self._units.get(model)
        if not units:
            return 1.0
        reported = self._reported.get(model) or 0.0
        return min(_MAX_FACTOR, max(_MIN_FACTOR, reported / units))

    def observe(self, model: str, units: int, reported_tokens: int) -> None:
        """A backend reported ``reported_tokens`` for a prompt estimated at ``units``
        (ignored when either is not positive)."""
        if units > 0 and reported_tokens > 0:
            self._reported.observe(model, reported_tokens)
            self._units.observe(model, units)
