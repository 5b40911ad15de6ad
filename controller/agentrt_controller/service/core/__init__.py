"""The controller's core behind one facade: queues, backends, retention, tenants, charging."""
