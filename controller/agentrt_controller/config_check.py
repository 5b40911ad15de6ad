"""How every config section is validated: one frozen dataclass per section, checked by pydantic.

A section (``SchedulerConfig``, ``TenancyConfig``, ``IsolationConfig``,
``AdaptiveWindowConfig``, ``RetentionConfig``, ``BreakerConfig``, ``CostModel``, ``BackendSpec``
and ``ControllerConfig`` itself) is a frozen dataclass whose field annotations say everything a
single value must be: its type, its bounds (``Annotated[float, Field(gt=0)]``), its allowed
words (``Literal``), how a table becomes a nested section (:func:`from_table`). A rule is
written once, there, and two entry points apply it:

* :func:`check_fields`, called first in each section's ``__post_init__``, validates every field
  of a section however it was built (a test, the simulator, an embedder, a config table) with a
  pydantic ``TypeAdapter`` per field, and stores what pydantic converts (a list to a tuple, an
  int to a float, a table to a nested section). A section's ``__pydantic_config__`` says
  whether values are strict (:data:`SECTION`: tables hold typed values) or lax (the
  controller's top level, whose values come as text from the environment and the flags).
* :func:`parse_section` builds a section from a config table (a file's table, a JSON
  environment variable or flag, a mapping given by code): unknown and missing keys are refused,
  then the constructor runs the checks above.

Rules between fields (``min_window <= initial_window``...) stay in each ``__post_init__`` and
raise :class:`~agentrt.errors.ConfigError`. Every failure is one :class:`SectionError` (a
``ConfigError``) listing each problem as ``<path>: <problem>, got <value>``, e.g.
``controller.retention_options.max_ttl_s: must be > 0, got -1`` or
``controller.scheduling.betta: unknown key``; a section nested in another is reported at its
full path.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

from pydantic import BeforeValidator, ConfigDict, PydanticUserError, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from agentrt.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["SECTION", "SectionError", "as_tuple", "check_fields", "from_table", "parse_section"]

#: The pydantic settings of every section (``__pydantic_config__``): unknown keys are errors,
#: and values are strict (no ``"5"`` or ``true`` for a number, no ``"yes"`` for a flag: a table
#: holds typed values). ``ControllerConfig`` is lax instead: its values come as text from the
#: environment and the command line.
SECTION = ConfigDict(extra="forbid", strict=True)

_Section = TypeVar("_Section")

#: One problem: the key's path below the section (``("betta",)``) and what is wrong with it.
Problem = tuple[tuple[str | int, ...], str]


class SectionError(ConfigError):
    """A config section was refused; :attr:`problems` holds each key's path and problem, so a
    section nested in another one is reported at its full path."""

    def __init__(self, path: str, problems: list[Problem]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("; ".join(_line(path, loc, text) for loc, text in problems))


def parse_section(cls: type[_Section], values: object, path: str) -> _Section:
    """``cls`` built from the table ``values`` (or ``values`` itself when it is already a
    ``cls``); ``path`` names the table in messages (``"controller.scheduling"``).

    Raises :class:`SectionError` (a :class:`ConfigError`) for unknown keys and bad values.
    """
    if isinstance(values, cls):
        return values
    if not isinstance(values, Mapping):
        raise SectionError(path, [((), f"must be a table, got {values!r}")])
    names = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    problems: list[Problem] = [((str(key),), "unknown key") for key in values if key not in names]
    problems += [
        ((name,), "required")
        for name, f in names.items()
        if name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if problems:
        raise SectionError(path, problems)
    try:
        return cls(**values)
    except SectionError as exc:  # a nested section's, or a field's, report
        here = tuple(part for part in exc.path.split(".") if part)
        raise SectionError(path, [((*here, *loc), text) for loc, text in exc.problems]) from None
    except ConfigError as exc:  # a rule between fields (the section's __post_init__)
        raise SectionError(path, [((), str(exc))]) from None


def check_fields(section: DataclassInstance, path: str = "") -> None:
    """Validate each field of a dataclass section against its annotation, in place (converted
    values are stored back); ``path`` prefixes the keys in messages.

    Raises :class:`SectionError` naming every bad field at once.
    """
    cls = type(section)
    problems: list[Problem] = []
    for name, adapter in _field_adapters(cls).items():
        value = getattr(section, name)
        try:
            checked = adapter.validate_python(value)
        except ValidationError as exc:
            # a secret (a field kept out of the repr) is not shown in the message either
            shown = name not in _secret_fields(cls)
            problems += [((name, *loc), text) for loc, text in _problems(exc, shown)]
            continue
        if checked is not value:
            object.__setattr__(section, name, checked)
    if problems:
        raise SectionError(path, problems)


@functools.cache
def _field_adapters(cls: type[DataclassInstance]) -> dict[str, TypeAdapter[object]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    strict = ConfigDict(strict=getattr(cls, "__pydantic_config__", {}).get("strict", False))
    adapters: dict[str, TypeAdapter[object]] = {}
    for f in dataclasses.fields(cls):
        try:
            adapters[f.name] = TypeAdapter(hints[f.name], config=strict)
        except PydanticUserError:  # a nested section: validated by its own settings
            adapters[f.name] = TypeAdapter(hints[f.name])
    return adapters


def as_tuple(value: object) -> object:
    """A list from a table as the tuple a field holds (``BeforeValidator`` of tuple fields)."""
    return tuple(value) if isinstance(value, list) else value


def from_table(cls: type[_Section]) -> BeforeValidator:
    """The ``BeforeValidator`` of a field holding a nested section ``cls``: a table given for
    it is parsed (:func:`parse_section`; problems are reported below the field's path)."""

    def parse(value: object) -> object:
        return parse_section(cls, value, "") if isinstance(value, Mapping) else value

    return BeforeValidator(parse)


@functools.cache
def _secret_fields(cls: type[DataclassInstance]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if not f.repr)


def _problems(exc: ValidationError, show_values: bool = True) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        inner = error.get("ctx", {}).get("error")
        loc = tuple(part for part in error["loc"] if not _is_union_tag(part))
        if isinstance(inner, SectionError):  # a nested section's own report
            here = tuple(p for p in inner.path.split(".") if p)
            problems += [((*loc, *here, *sub), text) for sub, text in inner.problems]
        elif (loc, _text(error, show_values)) not in problems:
            problems.append((loc, _text(error, show_values)))
    return problems


def _is_union_tag(part: str | int) -> bool:
    # pydantic names the member of a union a value failed against ("int", "literal['x']").
    return isinstance(part, str) and ("[" in part or part in ("int", "float", "bool", "str"))


_WORDS = {
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "literal_error": "must be {expected}",
    "finite_number": "must be a finite number",
    "too_short": "must hold at least {min_length} item(s)",
    "missing": "required",
    "missing_argument": "required",
}


def _text(error: ErrorDetails, show_value: bool = True) -> str:
    kind = error["type"]
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return "unknown key"
    ctx = {k: _number(v) for k, v in error.get("ctx", {}).items()}
    if kind == "value_error":  # a ConfigError of a section's __post_init__: says it all
        return str(error.get("ctx", {}).get("error", error["msg"]))
    if kind in _WORDS:
        text = _WORDS[kind].format(**ctx)
    elif kind.startswith("int_"):
        text = "must be an integer"
    elif kind.startswith("float_"):
        text = "must be a number"
    elif kind.startswith("bool_"):
        text = "must be true or false"
    elif kind.startswith(("dict_", "dataclass_", "model_")):
        text = "must be a table"
    else:
        text = error["msg"][:1].lower() + error["msg"][1:]
    if kind.startswith("missing") or not show_value:
        return text
    return f"{text}, got {error['input']!r}"


def _number(value: object) -> object:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _line(path: str, loc: tuple[str | int, ...], text: str) -> str:
    where = ".".join(str(part) for part in (path, *loc) if part != "")
    return f"{where}: {text}" if where else text
