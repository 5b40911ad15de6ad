"""Discrete-event simulator driving the engine model and the controller policies."""
