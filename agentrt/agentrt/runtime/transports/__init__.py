"""The runtime's HTTP transport: small layers stacked on httpx's ``AsyncBaseTransport`` seam.

Every client the runtime hands out sends through the same stack, outermost first:

* ``recording.RecordingTransport`` — finds the LLM call a request belongs to (the SDK
  helper's call, or a raw client call recorded as a node of the current program or of an
  ad-hoc run) and hands it down as a ``target.CallTarget`` request extension;
* ``retry.RetryTransport`` — resends a request the server never took (connection refused,
  503 with ``Retry-After``) for up to ``retry_budget_s``: a controller restart;
* ``deadline.DeadlineTransport`` — the call's budget: refuses a call with no time left, caps
  its HTTP timeouts just past the program's deadline;
* ``tagging.TaggingTransport`` — the ``X-Agentrt-*`` call tags and ``traceparent``
  (docs/protocol.md);
* ``fallback.FallbackTransport`` — only with ``fallback_base_url``: sends to the fallback
  endpoint while the primary one is unreachable;
* ``sharding.ShardedTransport`` — the connection pools: a program's calls go through one of
  them, admitted a bounded number at a time.

The runtime composes them (``agentrt.runtime.runtime``) and owns the pools; no layer closes
anything on ``aclose``.
"""
