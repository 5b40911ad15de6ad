"""The one version source of every agentrt distribution (each member's pyproject reads it)."""

__version__ = "0.1.0"
