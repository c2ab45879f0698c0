"""The child side of a run: everything that happens inside the spawned worker process.

`entry.run_worker` is the spawn target. It validates its payload once into the typed
`run_config.WorkerConfig`, which everything below reads by attribute, loads data through
`data` (torch-free, shared by both backends), then hands over to a backend:
`torch_backend` (transformers + PEFT + TRL) or `mlx`. Heavy libraries are imported
lazily inside these modules, so importing this package costs nothing in the server process.
"""
