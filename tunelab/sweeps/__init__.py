"""Hyperparameter sweeps (`tunelab sweep`): a base run config searched over a space by
Optuna, each trial an ordinary run through the orchestrator.

spec.py reads and checks a sweep file (torch- and Optuna-free, so the server can import
it); study.py builds the Optuna study, sampler and pruner on the run history's own
database; runner.py drives the trials; show.py prints a sweep's table.
"""
