"""Record -> simulate: turn the spans the SDK recorded of a live run into a simulator trace.

``agentrt trace export SPANS_FILE -o programs.jsonl`` (docs/trace-export.md); the result replays
with ``agentrt bench sim --trace-in`` and ``agentrt bench replay``.
"""

from agentrt_sim.export.convert import ExportSummary, spans_to_programs
from agentrt_sim.export.spans import Span, SpanFileError, read_spans

__all__ = ["ExportSummary", "Span", "SpanFileError", "read_spans", "spans_to_programs"]
