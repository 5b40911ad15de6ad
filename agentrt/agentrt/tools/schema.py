"""``@tool``: an async function with type hints becomes a validated OpenAI tool.

The arguments' JSON schema comes from a pydantic model built from the signature (parameter
types, defaults, ``Annotated[..., Field(description=...)]`` and a Google-style ``Args:``
docstring section); the model's arguments are validated against the same model. A parameter
annotated ``IdempotencyKey`` is not part of the schema: the runtime injects the step's
idempotency key there (stable across re-runs; pass it to a provider that deduplicates).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any, Generic, NewType, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from agentrt.errors import ConfigError, ToolArgumentsInvalid
from agentrt.runtime.config import ToolErrorMode
from agentrt.tools.runnable import Reconcile

__all__ = ["IdempotencyKey", "Tool", "tool"]

#: Annotate a tool parameter with this to receive the step's idempotency key.
IdempotencyKey = NewType("IdempotencyKey", str)

R = TypeVar("R")
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class Tool(Generic[R]):
    """A tool: schema, validation and the function. ``await t(...)`` runs it as a step of the
    current program (node, span, controller events, journal). Implements
    ``agentrt.tools.runnable.RunnableTool``."""

    def __init__(
        self,
        fn: Callable[..., Awaitable[R]],
        *,
        name: str | None = None,
        description: str | None = None,
        side_effect: bool = False,
        idempotent: bool = False,
        reconcile: Reconcile | None = None,
        timeout_s: float | None = None,
        on_error: ToolErrorMode | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise ConfigError(f"@tool needs an async function, got {fn!r}")
        self.fn = fn
        self.name = name or fn.__name__
        if not _NAME_RE.match(self.name):
            raise ConfigError(f"tool name must match {_NAME_RE.pattern}, got {self.name!r}")
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        self.description = description if description is not None else summary
        #: The tool changes the outside world: it runs through the journal (intent first).
        self.side_effect = side_effect
        #: Running it twice is harmless (the provider deduplicates by key, or it is a read).
        self.idempotent = idempotent
        #: Asks the outside world whether a step with this key already happened.
        self.reconcile = reconcile
        #: Per-call timeout (seconds); None = the runtime's default, then only the deadline.
        self.timeout_s = timeout_s
        if timeout_s is not None and not timeout_s > 0:
            raise ConfigError("timeout_s must be > 0 seconds or None")
        if on_error not in (None, "return", "raise"):
            raise ConfigError(f"on_error must be 'return', 'raise' or None, got {on_error!r}")
        #: What an exception the function raises does (see :meth:`error_mode`); None = the
        #: runtime's ``tool_on_error`` for a read-only tool, ``raise`` for a side effect.
        self.on_error: ToolErrorMode | None = on_error
        self.key_param: str | None = None
        self.args_model: type[BaseModel] = self._build_model(arg_docs)
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        self.parameters: dict[str, Any] = schema

    def _build_model(self, arg_docs: dict[str, str]) -> type[BaseModel]:
        try:
            hints = get_type_hints(self.fn, include_extras=True)
        except NameError as exc:
            raise ConfigError(f"tool {self.name}: cannot resolve type hints ({exc})") from exc
        fields: dict[str, Any] = {}
        for param in inspect.signature(self.fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {self.name}: *args / **kwargs are not supported")
            annotation = hints.get(param.name, Any)
            if annotation is IdempotencyKey:
                self.key_param = param.name
                continue
            default = ... if param.default is inspect.Parameter.empty else param.default
            doc = arg_docs.get(param.name)
            info = Field(default, description=doc) if doc else Field(default)
            fields[param.name] = (annotation, info)
        return create_model(
            f"{self.name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )

    def error_mode(self, runtime_default: ToolErrorMode) -> ToolErrorMode:
        """What an exception from the function does: ``return`` (a ``ToolFailed`` result for
        the model) or ``raise``. A side-effecting tool raises unless it says ``return``
        itself: the runtime-wide default never decides for a side effect."""
        if self.on_error is not None:
            return self.on_error
        return "raise" if self.side_effect else runtime_default

    def openai_schema(self) -> dict[str, Any]:
        """The ``tools=[...]`` entry for the chat completions API."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}

    def parse(self, arguments: str | dict[str, Any] | None) -> BaseModel:
        """Validate the model's arguments (a JSON string or a dict); raises
        ``ToolArgumentsInvalid`` with a message meant for the model."""
        try:
            if isinstance(arguments, str):
                return self.args_model.model_validate_json(arguments or "{}")
            return self.args_model.model_validate(arguments or {})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in exc.errors(include_url=False)
            )
            raise ToolArgumentsInvalid(
                f"invalid arguments for tool {self.name}: {problems}"
            ) from None

    async def invoke(self, arguments: BaseModel, key: str) -> R:
        """Call the function with validated arguments (and the key, if it takes one)."""
        kwargs = {name: getattr(arguments, name) for name in type(arguments).model_fields}
        if self.key_param is not None:
            kwargs[self.key_param] = IdempotencyKey(key)
        return await self.fn(**kwargs)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the tool as a step of the current program; returns its (JSON-able) result.

        Raises ``ToolError`` subclasses on failure (and ``JournalError`` for side effects)."""
        from agentrt.tools.runner import run_tool

        bound = inspect.signature(self.fn).bind_partial(*args, **kwargs)
        arguments = {k: v for k, v in bound.arguments.items() if k != self.key_param}
        result = await run_tool(self, arguments)
        if result.error is not None:
            raise result.error
        return result.value

    def __repr__(self) -> str:
        return f"Tool({self.name!r}, side_effect={self.side_effect}, on_error={self.on_error!r})"


@overload
def tool(fn: Callable[..., Awaitable[R]], /) -> Tool[R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    side_effect: bool = False,
    idempotent: bool = False,
    reconcile: Reconcile | None = None,
    timeout_s: float | None = None,
    on_error: ToolErrorMode | None = None,
) -> Callable[[Callable[..., Awaitable[R]]], Tool[R]]: ...


def tool(
    fn: Callable[..., Awaitable[R]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    side_effect: bool = False,
    idempotent: bool = False,
    reconcile: Reconcile | None = None,
    timeout_s: float | None = None,
    on_error: ToolErrorMode | None = None,
) -> Tool[R] | Callable[[Callable[..., Awaitable[R]]], Tool[R]]:
    """Make an async function a :class:`Tool` — ``@tool`` or ``@tool(side_effect=True, ...)``.

    ``side_effect``: run through the journal with an intent recorded first (fails closed
    without a journal); ``idempotent``: re-running an unknown outcome is harmless;
    ``reconcile(key)``: asks the outside world about an unknown outcome; ``timeout_s``: per call
    (``ToolTimeout``); ``on_error``: ``return`` an exception the function raises to the model
    (as a ``ToolFailed`` result) or ``raise`` it — None: ``RuntimeConfig.tool_on_error`` for a
    read-only tool, ``raise`` for a side effect. Raises ``ConfigError`` for a sync function or
    an unusable signature.
    """

    def wrap(f: Callable[..., Awaitable[R]]) -> Tool[R]:
        return Tool(
            f,
            name=name,
            description=description,
            side_effect=side_effect,
            idempotent=idempotent,
            reconcile=reconcile,
            timeout_s=timeout_s,
            on_error=on_error,
        )

    return wrap(fn) if fn is not None else wrap


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary (text before ``Args:``) and per-argument descriptions (Google style)."""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section = "summary"
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            section, current = "args", None
            continue
        if stripped.endswith(":") and stripped[:-1] in ("Returns", "Raises", "Yields", "Example"):
            section = "other"
            continue
        if section == "summary":
            summary_lines.append(stripped)
        elif section == "args" and stripped:
            match = re.match(r"^(\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", stripped)
            if match and line.startswith((" ", "\t")) and not line.startswith(" " * 8):
                current = match.group(1)
                args[current] = match.group(3)
            elif current is not None:
                args[current] += " " + stripped
    return " ".join(s for s in summary_lines if s).strip(), args
