"""`/api/sweeps`: start a hyperparameter sweep on this server, and list the sweeps.

A sweep (tunelab/sweeps, docs/SWEEPS.md) is checked completely before it starts: its
shape and space, every corner of the space as a run config, each with the checks a start
over HTTP makes (opt-ins for the caller's role, paths confined to the data roots); any
problem is a 422 naming the field. It then runs in a thread of this server (no process
of its own): its trials are ordinary runs through the server's orchestrator and queue,
owned by the key that started the sweep. A sweep already running here is a 409. A server
restart does not resume a sweep by itself: POST it again (the same name resumes it).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from tunelab.server.errors import ApiError
from tunelab.server.roles import caller_of
from tunelab.server.schemas import error_responses
from tunelab.server.user_paths import check_resume_owned, checked_config
from tunelab.store import sweeps as table
from tunelab.sweeps.spec import check_corners, check_sweep

router = APIRouter(tags=["sweeps"], responses=error_responses(401))
log = logging.getLogger("tunelab.server")


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
    running: bool = Field(description="Whether this server is running the sweep now.")
    best_run_id: int | None
    best_value: float | None
    trials: list[SweepTrial]


@router.post("/api/sweeps", status_code=202, response_model=SweepStarted, responses=error_responses(403, 409, 422))
def start_sweep(body: dict[str, Any], request: Request) -> SweepStarted:
    """Start a sweep: `base` (a run config), `space`, `objective`, `trials`, `max_hours`,
    `parallel`, `sampler`, `pruner` and `name`, as in a sweep file (base inline)."""
    from tunelab.sweeps.runner import SweepRunner

    state = request.app.state
    caller = caller_of(request)
    spec = check_sweep({"name": "sweep", **body})
    def checked(cfg: Any) -> Any:
        config = checked_config(cfg, state, role=caller.role)
        check_resume_owned(config, state.store, caller)
        return config

    check_corners(spec, checked)
    with _LOCK:
        live = _live(state)
        if spec.name in live and live[spec.name].is_alive():
            raise ApiError(409, "sweep_running", f"sweep {spec.name!r} is running on this server already", field="name")
        # Each trial starts with its checked config (paths resolved), not the one checked and set aside:
        # a relative data path means the same file to the check and to the worker.
        runner = SweepRunner(state.store, state.orchestrator, spec, owned_by=caller.key_name, prepare=checked)
        thread = threading.Thread(target=_run, args=(runner,), name=f"tunelab-sweep-{runner.sweep_id}", daemon=True)
        live[spec.name] = thread
        thread.start()
    return SweepStarted(id=runner.sweep_id, name=spec.name)


@router.get("/api/sweeps", response_model=list[Sweep])
def list_sweeps(request: Request) -> list[Sweep]:
    """Every sweep in the history, oldest first, with its trials and best run."""
    state = request.app.state
    with _LOCK:
        live = dict(_live(state))
    return [Sweep(id=s["id"], name=s["name"], metric=s["spec"]["objective"]["metric"],
                  direction=s["spec"]["objective"]["direction"], running=s["name"] in live and live[s["name"]].is_alive(),
                  best_run_id=s["best_run_id"], best_value=s["best_value"],
                  trials=[SweepTrial(**t) for t in table.list_trials(state.store, s["id"])])
            for s in table.list_sweeps(state.store)]


_LOCK = threading.Lock()  # guards each app's table of sweep threads


def _live(state: Any) -> dict[str, threading.Thread]:
    """This server's sweep threads by sweep name (call with _LOCK held)."""
    if not hasattr(state, "sweeps"):
        state.sweeps = {}
    return state.sweeps


def _run(runner: Any) -> None:
    try:
        runner.run()
    except Exception:  # a sweep thread must not die silently: its trials stay in the history
        log.exception("sweep %s ended with an error", runner.sweep_id)
