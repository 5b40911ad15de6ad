"""Discrete-event simulator driving the engine model and the controller's policy objects.

Kept import-light (``agentrt --help`` imports :mod:`agentrt_sim.cli`); import the modules:

* :mod:`agentrt_sim.sim` — :class:`~agentrt_sim.sim.Simulation`,
:class:`~agentrt_sim.sim.SimConfig`,
  :class:`~agentrt_sim.sim.Policies`: the event loop;
* :mod:`agentrt_sim.runner` — :class:`~agentrt_sim.runner.BenchConfig`, ``run_comparison``,
  ``sweep``: several configurations on the same programs;
* :mod:`agentrt_sim.registry` — :class:`~agentrt_sim.registry.PolicySpec`, ``build_policies``:
  policy names → objects (the single place names resolve);
* :mod:`agentrt_sim.workloads` — program model, generators, JSONL traces, Fig. 2;
* :mod:`agentrt_sim.metrics`, :mod:`agentrt_sim.costs`, :mod:`agentrt_sim.retention` — metrics,
  the service cost hook and oracle, the retention seam.

See docs/simulator.md.
"""
