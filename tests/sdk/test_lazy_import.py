"""``import agentrt`` is lazy: the ``agentrt`` command's help never imports the SDK's heavy
dependencies (a deterministic check on ``sys.modules``, not a timing test)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import agentrt

#: Modules ``agentrt --help`` must not import (they cost most of a second together).
HEAVY = ("openai", "httpx", "opentelemetry", "sqlalchemy", "agentrt.runtime", "agentrt.patterns")

_PROBE = """
import json, sys
import agentrt.cli
try:
    agentrt.cli.main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", [["--help"], ["engine", "--help"], ["journal", "--help"]])
def test_help_does_not_import_heavy_modules(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, check=True
    )
    assert "usage: agentrt" in done.stdout
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "agentrt.cli" in loaded
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []


def test_lazy_names_resolve_to_the_defining_objects() -> None:
    from agentrt.runtime.chat import chat
    from agentrt.runtime.runtime import Runtime

    assert agentrt.chat is chat and agentrt.Runtime is Runtime
    assert set(dir(agentrt)) >= set(agentrt.__all__)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        getattr(agentrt, "no_such_name")  # noqa: B009 - the dynamic lookup is what is tested


_SDK_ONLY_PROBE = """
import json, sys
import agentrt, agentrt.journal
for package in (agentrt, agentrt.journal):
    for name in package.__all__:
        getattr(package, name)
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.timeout(60)
def test_the_sdk_loads_neither_the_otel_sdk_nor_other_members() -> None:
    """Every public name of ``agentrt`` and ``agentrt.journal`` resolves without the
    OpenTelemetry SDK (an extra: ``agentrt[otel]``) and without another distribution."""
    done = subprocess.run(
        [sys.executable, "-c", _SDK_ONLY_PROBE], capture_output=True, text=True, check=True
    )
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    others = ("agentrt_controller", "agentrt_emulator", "agentrt_sim", "agentrt_adapters")
    foreign = [
        m
        for m in loaded
        if m == "opentelemetry.sdk"
        or m.startswith("opentelemetry.sdk.")
        or m.split(".")[0] in (*others, "agentrt_demo")
    ]
    assert foreign == []
