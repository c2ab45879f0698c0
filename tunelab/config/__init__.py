"""The run config: its fields and checks, the settings of each family and objective, and config files."""
