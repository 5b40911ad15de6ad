"""Keep the SDK's public surface honest: ``agentrt.__all__`` is the whole public surface
(docs/architecture.md, "Design rules")."""

from __future__ import annotations

import agentrt
from agentrt import errors


def test_all_names_exist_and_are_exported() -> None:
    for name in agentrt.__all__:
        assert hasattr(agentrt, name), name
    public = {n for n in vars(agentrt) if not n.startswith("_")} - {"annotations"}
    # Submodules are reachable as attributes once imported; they are not public API.
    modules = {n for n in public if type(getattr(agentrt, n)).__name__ == "module"}
    assert public - modules <= set(agentrt.__all__), public - modules - set(agentrt.__all__)


def test_every_error_derives_from_the_root() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.AgentrtError), name


def test_model_discovery_is_public() -> None:
    from agentrt.runtime import models

    assert "discover_model" in agentrt.__all__
    assert agentrt.discover_model is models.discover_model
