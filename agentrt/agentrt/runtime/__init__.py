"""The SDK runtime: config, HTTP tagging transport, controller link, telemetry, chat helper."""
