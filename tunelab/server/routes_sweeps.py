"""`/api/sweeps`: start a hyperparameter sweep on this server, list the sweeps, stop one.

A sweep (tunelab/sweeps, docs/SWEEPS.md) is checked completely before it starts: its
shape and space, every corner of the space as a run config, each with the checks a start
over HTTP makes (opt-ins for the caller's role, paths confined to the data roots); any
problem is a 422 naming the field. It then runs in a thread of this server (no process
of its own, sweep_threads.py): its trials are ordinary runs through the server's
orchestrator and queue, owned by the key that started the sweep. A sweep already running
here or on another live server is a 409. A server that ends mid-sweep resumes the sweep
at its next start; a stopped sweep is not resumed (POST it again: the same name resumes it).
"""

from __future__ import annotations

import threading
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from tunelab.server import sweep_threads
from tunelab.server.errors import ApiError
from tunelab.server.roles import caller_of
from tunelab.server.run_ids import SweepId
from tunelab.server.schemas import error_responses
from tunelab.server.user_paths import check_resume_owned, checked_config
from tunelab.store import sweeps as table
from tunelab.sweeps.spec import check_corners, check_sweep
from tunelab.sweeps.study import MIN_TRIALS_FOR_IMPORTANCE, sweep_importances  # Optuna loads on first use only

router = APIRouter(tags=["sweeps"], responses=error_responses(401))


class SweepStarted(BaseModel):
    id: int
    name: str


class SweepTrial(BaseModel):
    trial: int
    run_id: int | None = Field(description="The trial's run (null: its start was refused).")
    state: str = Field(description="running, complete, pruned, failed or interrupted.")
    value: float | None = Field(description="The objective, as last reported.")
    params: dict[str, Any]
    run_status: str | None


class Sweep(BaseModel):
    id: int
    name: str
    metric: str
    direction: str
    trials_budget: int = Field(description="How many trials the sweep runs (complete, pruned or failed).")
    space: list[str] = Field(description="The searched run settings, in the sweep's order.")
    running: bool = Field(description="Whether this server is running the sweep now.")
    started_by: str | None = Field(description="The API key that started it on a server (null: the server's token or the CLI).")
    best_run_id: int | None
    best_value: float | None
    importances: dict[str, float] = Field(description="Each searched setting's importance to the objective "
                                                       "(Optuna's fANOVA); empty until 3 trials completed.")
    trials: list[SweepTrial]


class SweepStopped(BaseModel):
    id: int
    name: str
    stopping: bool


def _prepare_for(state: Any, role: str, key_name: str | None):
    # Each trial starts with its checked config (paths resolved), not the one checked and set aside:
    # a relative data path means the same file to the check and to the worker.
    def prepare(cfg: Any) -> Any:
        config = checked_config(cfg, state, role=role)
        check_resume_owned(config, state.store, role, key_name)  # a member continues only its own runs
        return config

    return prepare


def resume_sweeps(state: Any) -> list[int]:
    """At start-up: resume the sweeps this server was running when it last ended."""
    return sweep_threads.resume_claimed(state, lambda role, key_name: _prepare_for(state, role, key_name))


@router.post("/api/sweeps", status_code=202, response_model=SweepStarted, responses=error_responses(403, 409, 422))
def start_sweep(body: dict[str, Any], request: Request) -> SweepStarted:
    """Start a sweep: `base` (a run config), `space`, `objective`, `trials`, `max_hours`,
    `parallel`, `sampler`, `pruner` and `name`, as in a sweep file (base inline)."""
    state = request.app.state
    caller = caller_of(request)
    spec = check_sweep({"name": "sweep", **body})
    prepare = _prepare_for(state, caller.role, caller.key_name)
    check_corners(spec, prepare)

    def refuse(why: str) -> None:
        raise ApiError(409, "sweep_running", why, field="name")

    sweep_id = sweep_threads.start(state, spec, caller.key_name, prepare, refuse)
    return SweepStarted(id=sweep_id, name=spec.name)


@router.get("/api/sweeps", response_model=list[Sweep])
def list_sweeps(request: Request) -> list[Sweep]:
    """Every sweep in the history, oldest first, with its trials, best run and the settings' importances."""
    state = request.app.state
    live = sweep_threads.live_sweeps(state)
    answer = []
    for s in table.list_sweeps(state.store):
        trials = table.list_trials(state.store, s["id"])
        spec = s["spec"]
        answer.append(Sweep(
            id=s["id"], name=s["name"], metric=spec["objective"]["metric"], direction=spec["objective"]["direction"],
            trials_budget=spec["trials"], space=list(spec["space"]), running=s["name"] in live,
            started_by=s["started_by"], best_run_id=s["best_run_id"], best_value=s["best_value"],
            importances=_importances(state, s["id"], trials), trials=[SweepTrial(**t) for t in trials]))
    return answer


@router.post("/api/sweeps/{sweep_id}/stop", response_model=SweepStopped, responses=error_responses(403, 404, 409))
def stop_sweep(sweep_id: SweepId, request: Request) -> SweepStopped:
    """Stop a sweep running on this server: no new trial, the running ones stop and save (not
    counted). It is not resumed at the server's next start; POST it again to go on. A member
    stops only the sweeps its key started; an admin any."""
    state = request.app.state
    sweep = table.get_sweep(state.store, sweep_id)
    if sweep is None:
        raise ApiError(404, "sweep_not_found", f"no sweep {sweep_id}; GET /api/sweeps lists them", field="sweep_id")
    caller = caller_of(request)
    if caller.role != "admin" and sweep["started_by"] != caller.key_name:
        whose = f"the key {sweep['started_by']!r}" if sweep["started_by"] else "the server's own token (owner 'local')"
        raise ApiError(403, "not_owner", f"sweep {sweep_id} was started by {whose}; the member key {caller.shown!r} "
                                         "stops only its own sweeps: ask its owner or an admin")
    if not sweep_threads.stop(state, sweep["name"]):
        raise ApiError(409, "sweep_not_running", f"sweep {sweep_id} is not running on this server", field="sweep_id")
    return SweepStopped(id=sweep_id, name=sweep["name"], stopping=True)


_IMPORTANCE_LOCK = threading.Lock()


def _importances(state: Any, sweep_id: int, trials: list[dict[str, Any]]) -> dict[str, float]:
    """The sweep's importances, computed again only when its set of complete trials changed
    (the page polls this list; Optuna's fANOVA takes a moment per sweep)."""
    complete = tuple(t["trial"] for t in trials if t["state"] == "complete")
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE:
        return {}
    with _IMPORTANCE_LOCK:
        cache = _cache(state)
        if cache.get(sweep_id, (None,))[0] != complete:
            cache[sweep_id] = (complete, sweep_importances(state.store, sweep_id))
        return cache[sweep_id][1]


def _cache(state: Any) -> dict[int, tuple[tuple[int, ...], dict[str, float]]]:
    if not hasattr(state, "sweep_importances"):
        state.sweep_importances = {}
    return state.sweep_importances
