"""The SDK's program model: programs, threads and nodes of a dynamic DAG (pure data)."""
