"""The Optuna side of a sweep: its study, sampler and pruner, on the run history's database.

The study is named after the sweep and kept in Optuna's RDB storage on the same database
as the runs (SQLite file or TUNELAB_DATABASE_URL), so a sweep resumes after its process
dies. Optuna is imported here only, when a sweep runs or is shown.
"""

from __future__ import annotations

import warnings
from typing import Any

from tunelab.store import Store
from tunelab.store.sweeps import optuna_url
from tunelab.sweeps.spec import SweepSpec, dimensions

STUDY_PREFIX = "tunelab-sweep-"
# SQLite's default busy wait is 5 s; a trial's run writes its metrics to the same file.
SQLITE_TIMEOUT_S = 60
# Fewer complete trials than this say nothing about which parameter matters.
MIN_TRIALS_FOR_IMPORTANCE = 3


def _optuna():
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the CLI prints its own trial lines
    return optuna


def trial_states():
    """Optuna's TrialState (COMPLETE, PRUNED, FAIL, RUNNING)."""
    return _optuna().trial.TrialState


def storage(store: Store):
    optuna = _optuna()
    url = optuna_url(store)
    kwargs = {"connect_args": {"timeout": SQLITE_TIMEOUT_S}} if url.startswith("sqlite") else {}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def open_study(store: Store, spec: SweepSpec, sweep_id: int):
    """The sweep's study, created on first use and loaded as it was afterwards."""
    optuna = _optuna()
    return optuna.create_study(study_name=f"{STUDY_PREFIX}{sweep_id}", storage=storage(store), load_if_exists=True,
                               direction=spec.objective.direction, sampler=_sampler(spec), pruner=_pruner(spec))


def load_study(store: Store, sweep_id: int):
    optuna = _optuna()
    return optuna.load_study(study_name=f"{STUDY_PREFIX}{sweep_id}", storage=storage(store))


def _sampler(spec: SweepSpec):
    samplers = _optuna().samplers
    if spec.sampler == "grid":
        return samplers.GridSampler(grid(spec), seed=spec.seed)
    if spec.sampler == "random":
        return samplers.RandomSampler(seed=spec.seed)
    return samplers.TPESampler(seed=spec.seed, n_startup_trials=max(1, min(10, spec.trials // 3)))


def grid(spec: SweepSpec) -> dict[str, list[Any]]:
    grid = {}
    for field, (kind, values) in dimensions(spec).items():
        grid[field] = list(range(values[0], values[1] + 1)) if kind == "int" else values
    return grid


def _pruner(spec: SweepSpec):
    pruners = _optuna().pruners
    if spec.pruner == "median":
        return pruners.MedianPruner(n_startup_trials=spec.pruner_startup_trials, n_warmup_steps=0)
    if spec.pruner == "successive_halving":
        return pruners.SuccessiveHalvingPruner()
    return pruners.NopPruner()


def suggest(trial, spec: SweepSpec) -> dict[str, Any]:
    """This trial's values for every field of the space."""
    params: dict[str, Any] = {}
    for field, (kind, values) in dimensions(spec).items():
        if kind == "log_uniform":
            params[field] = trial.suggest_float(field, values[0], values[1], log=True)
        elif kind == "uniform":
            params[field] = trial.suggest_float(field, values[0], values[1])
        elif kind == "int":
            params[field] = trial.suggest_int(field, values[0], values[1])
        else:
            params[field] = trial.suggest_categorical(field, values)
    return params


def params_of(trial) -> dict[str, Any]:
    """The values a trial was given so far."""
    return dict(trial.params)


def finished(study) -> dict[int, tuple[str, float | None]]:
    """The trials the study was told the end of: {number: ("complete" | "pruned", value)}."""
    states = _optuna().trial.TrialState
    ends = {states.COMPLETE: "complete", states.PRUNED: "pruned"}
    found = {}
    for t in study.get_trials(deepcopy=False, states=tuple(ends)):
        value = t.value if t.state == states.COMPLETE else (
            t.intermediate_values[max(t.intermediate_values)] if t.intermediate_values else None)
        found[t.number] = (ends[t.state], value)
    return found


def tell(study, trial, *args: Any, **kwargs: Any) -> None:
    """`study.tell`. The grid sampler stops the study once its last point is told, which
    Optuna allows inside `study.optimize` only and raises about otherwise, after recording
    the trial; the runner's own budget ends a grid sweep, so that stop is no error here."""
    try:
        study.tell(trial, *args, **kwargs)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


def fail_running(study) -> list[int]:
    """Mark the study's trials left RUNNING by a dead process as FAIL; their numbers."""
    optuna = _optuna()
    stale = [t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))]
    for number in stale:
        study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    return stale


def sweep_importances(store: Store, sweep_id: int) -> dict[str, float]:
    """The importances of sweep `sweep_id`'s parameters (`tunelab sweep show`, GET /api/sweeps)."""
    try:
        study = load_study(store, sweep_id)
    except KeyError:  # the sweep's row is written just before its study
        return {}
    return importances(study)


def importances(study) -> dict[str, float]:
    """Each parameter's importance to the objective; empty until enough trials completed."""
    optuna = _optuna()
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE:
        return {}
    with warnings.catch_warnings():  # "too few trials": the CLI shows nothing rather than equal weights
        warnings.simplefilter("ignore")
        try:
            return dict(optuna.importance.get_param_importances(study))
        except (RuntimeError, ValueError, ZeroDivisionError):
            return {}
