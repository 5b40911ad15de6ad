"""Which model a call runs on: the served models, aliases and fallbacks (docs/routing.md,
"Several models").

The backends say what they serve (their ``/v1/models``, read at every probe, or the spec's
``models`` option; :class:`~agentrt_controller.service.core.pool.BackendPool`). A call names a
model; :meth:`ModelCatalog.resolve` turns that name into the model the call runs on:

1. no ``model`` (or ``""``): the one served model when there is exactly one, else 400;
2. an **alias** (``model_aliases``, ``--model-alias NAME=MODEL``) becomes its model;
3. a model no backend lists is a 404 naming the served models and the aliases — unless it has
   a fallback list and one of those is up (its backends were all removed);
4. a model whose backends are all out (down, circuit open, draining) takes the first model of
   its **fallback** list (``model_fallbacks``, ``--model-fallback MODEL=A,B``) that has a
   healthy backend; with none up, it stays (the call then gets 503, and an SDK node with
   candidates tries its next one).

The decision is made once, when the call arrives; the routing pipeline's model constraint then
sends it only to backends serving the resolved model. While the controller knows no backend's
models (none answered yet), any name passes and the backend judges it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from agentrt_controller.service.errors import BadRequest, ModelNotFound

__all__ = ["ModelCatalog"]


class ModelCatalog:
    """Aliases and fallbacks over what the backends serve (pure lookups: the served models
    and their health come from the pool through the two callables).

    ``served()``: the model ids some live backend lists, ``None`` when none listed any;
    ``up(model)``: some backend serving ``model`` takes calls now.
    """

    def __init__(
        self,
        served: Callable[[], set[str] | None],
        up: Callable[[str], bool],
        *,
        aliases: Mapping[str, str] | None = None,
        fallbacks: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self._served = served
        self._up = up
        #: Alias -> model (validated by the config: no alias names another alias).
        self.aliases = dict(aliases or {})
        #: Model -> the models to use, in order, when every backend of it is out.
        self.fallbacks = {model: tuple(chain) for model, chain in (fallbacks or {}).items()}

    def resolve(self, requested: object) -> str:
        """The model a call naming ``requested`` (the body's ``model``) runs on (module
        docstring). Raises :class:`BadRequest` (not a string; missing with several or no
        known models) and :class:`ModelNotFound` (404, naming the served models)."""
        served = self._served()
        if requested is None or requested == "":
            if served is not None and len(served) == 1:
                return next(iter(served))
            several = (
                "; this controller serves " + ", ".join(repr(m) for m in sorted(served))
                if served
                else ""
            )
            raise BadRequest(f"'model' is required{several}", param="model")
        if not isinstance(requested, str):
            raise BadRequest("'model' must be a string", param="model")
        model = self.aliases.get(requested, requested)
        if served is None:
            return model
        if model in served and self._up(model):
            return model
        for candidate in self.fallbacks.get(model, ()):
            if candidate in served and self._up(candidate):
                return candidate
        if model in served:
            return model  # every backend of it is out and no fallback is up: 503 follows
        raise ModelNotFound(self._not_served(requested, served), param="model",
                            code="model_not_found")  # fmt: skip

    def listed(self, entries: list[dict[str, object]]) -> list[dict[str, object]]:
        """``entries`` (the union of the backends' ``/v1/models``) with one entry per alias
        whose model is among them (``"root"`` names the model, as vLLM does for LoRA)."""
        ids = {entry.get("id") for entry in entries}
        out = list(entries)
        for alias, model in sorted(self.aliases.items()):
            if model in ids and alias not in ids:
                out.append({"id": alias, "object": "model", "owned_by": "agentrt", "root": model})
        return out

    def _not_served(self, requested: str, served: set[str]) -> str:
        text = f"the model {requested!r} does not exist; served models: " + ", ".join(
            repr(m) for m in sorted(served)
        )
        aliases = [f"{a!r} -> {m!r}" for a, m in sorted(self.aliases.items()) if m in served]
        if aliases:
            text += "; aliases: " + ", ".join(aliases)
        return text
