"""The engine emulator: a pure vLLM-like engine model (``emulator.core``) and its HTTP server."""
