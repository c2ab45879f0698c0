"""Training backends: torch (transformers + PEFT + TRL) and MLX, each `run(config, ctx)`."""
