"""What the controller reports: Prometheus metrics, OpenTelemetry spans and exports,
introspection views."""
