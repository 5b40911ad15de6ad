"""Ready-made agent patterns, built only on the public primitives: ReAct, map-reduce, MCTS."""
