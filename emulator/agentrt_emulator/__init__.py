"""The engine emulator: a pure vLLM-like engine model (``agentrt_emulator.core``) and its HTTP
server."""
