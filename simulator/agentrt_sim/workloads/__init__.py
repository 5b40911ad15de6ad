"""Agent workloads for the simulator (docs/simulator.md §3): the program model, generators for
``chatbot``, ``react``, ``mapreduce``, ``mcts``, ``mixed``, ``coding``, ``research`` and
``agents`` (:mod:`.generate`), JSONL traces
(:mod:`.trace`) and the Fig. 2 example (:mod:`.fig2`). See docs/simulator.md §3."""
