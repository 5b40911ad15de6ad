"""Workloads of several tenants: each tenant its own workload, arrival rate and id behaviour.

A tenant load is written ``NAME:WORKLOAD@RATE[:rotate][:weight=W]``, several separated by
commas (``agentrt bench sim --tenants``)::

    well:mixed@0.6,greedy:mixed@1.8:rotate

* ``NAME`` — the tenant (the API-key holder the controller schedules fair shares between);
* ``WORKLOAD@RATE`` — a workload name (``agentrt_sim.workloads.generate.WORKLOAD_NAMES``) and
  its Poisson arrival rate (programs/s);
* ``rotate`` — the tenant sends every LLM call under a fresh program id (a client that rotates
  ids, or sends untagged calls): its programs keep their DAG, waits and prompts, but the
  controller sees one-call programs (:attr:`Program.rotate_call_ids`);
* ``weight=W`` — the tenant's fair-share weight (> 0; default 1) when tenancy is on.

Each tenant draws its programs from its own seed, derived from the run's seed and the tenant's
name, so a tenant's programs are the same whichever other tenants run beside it ("alone" and
"with a neighbour" compare like with like). Program ids are ``<tenant>/<id>``, and system
prompts are the tenant's own (``<tenant>/<system prompt id>``): tenants share no prefix.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentrt.errors import ConfigError
from agentrt_sim.workloads.generate import WORKLOAD_NAMES, generate_programs
from agentrt_sim.workloads.program import Program

__all__ = ["TenantLoad", "format_tenants", "generate_tenant_programs", "parse_tenants"]


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """One tenant's share of a workload."""

    #: Tenant name (non-empty; no ``,``, ``:``, ``@`` or ``/``).
    name: str
    #: Workload name.
    workload: str
    #: Program arrivals per second (Poisson, > 0).
    rate_per_s: float
    #: Every LLM call under a fresh program id.
    rotate: bool = False
    #: Fair-share weight (> 0).
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.name or any(ch in self.name for ch in ",:@/ "):
            raise ConfigError(
                f"tenant name {self.name!r} must be non-empty without , : @ / or spaces"
            )
        if self.workload not in WORKLOAD_NAMES:
            raise ConfigError(
                f"tenant {self.name!r}: unknown workload {self.workload!r}; "
                f"valid: {', '.join(WORKLOAD_NAMES)}"
            )
        if not (math.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise ConfigError(f"tenant {self.name!r}: rate must be > 0 programs/s")
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ConfigError(f"tenant {self.name!r}: weight must be > 0")

    def spec(self) -> str:
        """The ``NAME:WORKLOAD@RATE[:rotate][:weight=W]`` text of this load."""
        text = f"{self.name}:{self.workload}@{self.rate_per_s:g}"
        if self.rotate:
            text += ":rotate"
        if self.weight != 1.0:
            text += f":weight={self.weight:g}"
        return text


def _parse_one(item: str) -> TenantLoad:
    parts = [part.strip() for part in item.split(":")]
    if len(parts) < 2 or "@" not in parts[1]:
        raise ConfigError(f"tenant load {item!r}: expected NAME:WORKLOAD@RATE[:rotate][:weight=W]")
    workload, _, rate_text = parts[1].partition("@")
    try:
        rate = float(rate_text)
    except ValueError:
        raise ConfigError(f"tenant load {item!r}: rate {rate_text!r} is not a number") from None
    fields: dict[str, Any] = {}
    for option in parts[2:]:
        key, sep, value = option.partition("=")
        if option == "rotate":
            fields["rotate"] = True
        elif key == "weight" and sep:
            try:
                fields["weight"] = float(value)
            except ValueError:
                raise ConfigError(
                    f"tenant load {item!r}: weight {value!r} is not a number"
                ) from None
        else:
            raise ConfigError(
                f"tenant load {item!r}: unknown option {option!r}; valid: rotate, weight=W"
            )
    return TenantLoad(parts[0], workload.strip(), rate, **fields)


def parse_tenants(text: str) -> tuple[TenantLoad, ...]:
    """Parse a comma-separated list of tenant loads (module docstring); names are unique.

    Raises :class:`ConfigError` naming the bad item."""
    items = [item for item in (part.strip() for part in text.split(",")) if item]
    if not items:
        raise ConfigError("--tenants needs at least one NAME:WORKLOAD@RATE")
    loads = tuple(_parse_one(item) for item in items)
    names = [load.name for load in loads]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(f"duplicate tenant name(s) {duplicates}")
    return loads


def format_tenants(loads: Sequence[TenantLoad]) -> str:
    """The ``--tenants`` text of ``loads`` (inverse of :func:`parse_tenants`)."""
    return ",".join(load.spec() for load in loads)


def tenant_seed(seed: int, tenant: str) -> int:
    """The seed of ``tenant``'s programs in a run seeded ``seed`` (independent of the other
    tenants)."""
    return random.Random(f"agentrt-tenant-{seed}-{tenant}").randrange(1 << 31)


def generate_tenant_programs(
    loads: Sequence[TenantLoad],
    *,
    duration_s: float,
    seed: int,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Program]:
    """Every tenant's programs over ``[0, duration_s)``, tagged with the tenant, merged by
    arrival (ties by program id)."""
    programs: list[Program] = []
    for load in loads:
        for program in generate_programs(
            load.workload,
            rate_per_s=load.rate_per_s,
            duration_s=duration_s,
            seed=tenant_seed(seed, load.name),
            overrides=overrides,
        ):
            programs.append(
                dataclasses.replace(
                    program,
                    program_id=f"{load.name}/{program.program_id}",
                    system_prompt_id=f"{load.name}/{program.system_prompt_id}",
                    tenant=load.name,
                    rotate_call_ids=load.rotate,
                )
            )
    programs.sort(key=lambda p: (p.arrival_s, p.program_id))
    return programs
