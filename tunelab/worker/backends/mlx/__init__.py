"""The MLX backend (Apple silicon): its training run, loop and checkpoints, with the torch backend's events."""
