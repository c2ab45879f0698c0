"""A run's data in the worker: loading sources, recognising formats, and turning rows into tokens."""
