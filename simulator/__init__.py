"""Discrete-event simulator driving the engine model and the controller's policy objects.

Kept import-light (``agentrt --help`` imports :mod:`simulator.cli`); import the modules:

* :mod:`simulator.sim` — :class:`~simulator.sim.Simulation`, :class:`~simulator.sim.SimConfig`,
  :class:`~simulator.sim.Policies`: the event loop;
* :mod:`simulator.runner` — :class:`~simulator.runner.BenchConfig`, ``run_comparison``,
  ``sweep``: several configurations on the same programs;
* :mod:`simulator.registry` — :class:`~simulator.registry.PolicySpec`, ``build_policies``:
  policy names → objects (the single place names resolve);
* :mod:`simulator.workloads` — program model, generators, JSONL traces, Fig. 2;
* :mod:`simulator.metrics`, :mod:`simulator.costs`, :mod:`simulator.retention` — metrics,
  the service cost hook and oracle, the retention seam.

See docs/simulator.md.
"""
