"""Ray as the launcher's engine: the engine that starts a run's ranks as Ray Train workers, and its driver process."""
