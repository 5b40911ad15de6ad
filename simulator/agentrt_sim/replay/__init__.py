"""``agentrt bench replay``: a simulator trace's programs as live SDK programs (docs/replay.md).

* :mod:`agentrt_sim.replay.runner`: :func:`~agentrt_sim.replay.runner.replay` runs programs
  against an OpenAI-compatible server (:class:`~agentrt_sim.replay.runner.ReplayConfig`);
* :mod:`agentrt_sim.replay.prompts`: the chat prompts, sized to the trace's token counts;
* :mod:`agentrt_sim.replay.server`: probing the server (model, ``/tokenize``, ``/metrics``);
* :mod:`agentrt_sim.replay.records` and :mod:`agentrt_sim.replay.summary`: what is recorded,
  and the ``agentrt bench sim --json`` metrics computed from it;
* :mod:`agentrt_sim.replay.cli`: the command.

Nothing is imported here: the ``agentrt`` command imports the CLI module at start-up, which
must not pull in httpx or openai.
"""
