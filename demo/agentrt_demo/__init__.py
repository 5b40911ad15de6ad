"""``agentrt demo``: the whole system on one machine, and why it helps (docs/demo.md).

The demo starts emulated engines and a controller on loopback, runs a seeded mix of agent
programs (ReAct, map-reduce, MCTS; LangGraph and AutoGen agents when those extras are
installed) through the controller, runs the same programs straight to fresh FCFS engines, and
prints a summary table; it writes the OpenTelemetry spans as OTLP-JSON lines and a timeline
picture of every program's nodes per thread (``agentrt timeline TRACE_FILE`` draws one from any
such trace file).

Modules: ``settings`` (options), ``workload`` (the seeded program plan), ``agents`` (the agent
code), ``cluster`` / ``engine_proc`` (engines and controller), ``runner`` (one phase),
``progress`` (live display), ``traces`` (span files), ``analysis`` / ``report`` (the table),
``timeline`` / ``timeline_layout`` / ``render_html`` / ``render_png`` (the picture),
``frameworks`` (LangGraph and AutoGen programs), ``app`` (the whole run), ``cli`` (the two
commands).
"""
