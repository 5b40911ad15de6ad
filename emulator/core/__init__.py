"""The pure engine model: continuous batching, paged KV cache with prefix caching, vLLM-style
scheduling, retention pins and a roofline step-time model.

Nothing here does I/O or reads a clock: the HTTP server (``emulator.server``) and the
simulator (``simulator``) both pass ``now_s`` in and drive the same objects.
"""
