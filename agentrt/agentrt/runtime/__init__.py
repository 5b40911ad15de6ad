"""The SDK runtime: config, the program runner (``program``, ``frame``, ``flow``, ``adhoc``),
the HTTP transport stack, controller link, telemetry, chat helper."""
