"""The SDK's program model: programs, threads and nodes of a dynamic DAG, and the chain rule
that gives nodes their parents. Pure data: no clock, no I/O, nothing of the runtime, its
transports, the journal or OpenTelemetry (``agentrt.runtime`` runs programs on this model)."""
