"""`/api/queue` and `/api/runs/{id}/queue`: the runs waiting for devices, and their order.

The scheduler (tunelab/orchestrator) starts queued runs; these routes only show the
queue and change a waiting run's priority or place in it, through the store's atomic
statements, so a change racing a claim either lands before it or finds the run no
longer queued (409). Cancelling a queued run is `POST /api/runs/{id}/stop` with
`save: false`, as for a running one. Who may change which run is tunelab.server.roles
(OWN_RUN: a member only its own runs); here, what a member may change: priorities decide
whose runs start first across the team, so only an admin sets one, and a member moves its
run only among its own (the store refuses a move past another owner's run in the same
transaction as the move).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tunelab.server.errors import ApiError
from tunelab.server.roles import caller_of
from tunelab.server.run_ids import RunId
from tunelab.server.schemas import error_responses
from tunelab.store import QueueJump, RunNotFound, RunNotQueued

router = APIRouter(tags=["queue"], responses=error_responses(401))
PRIORITY_LIMIT = 1_000_000

DEVICE_REQUEST_HELP = "What the run asked for: {\"num_gpus\": n} or {\"gpu_ids\": [...]}; null: one device (a GPU or the CPU)."


class QueuedRun(BaseModel):
    id: int
    display_name: str | None
    model_name: str
    owner: str | None = Field(description="The API key that queued the run; null: the server's own token or the CLI.")
    queue_position: int = Field(description="1 starts next.")
    queue_priority: int = Field(description="Higher priorities start first; 0 by default.")
    device_request: dict[str, Any] | None = Field(description=DEVICE_REQUEST_HELP)
    queued_at: float = Field(description="Unix seconds.")


class ActiveRun(BaseModel):
    id: int
    display_name: str | None
    model_name: str
    owner: str | None = Field(description="The API key that started the run; null: the server's own token or the CLI.")
    devices: list[Any] | None = Field(description="The devices the run trains on (\"cpu\", \"gpu-0\", ...).")
    started_at: float | None = Field(description="Unix seconds.")
    phase: str = Field(description="loading, training, saving, stopping, ... (as /api/runs/{id}/status).")
    step: int = Field(description="The last step reported.")
    total_steps: int | None


class QueueAnswer(BaseModel):
    active: list[ActiveRun] = Field(description="Runs this server trains now, oldest first.")
    queued: list[QueuedRun] = Field(description="Runs waiting for devices, in the order they will start.")


class QueueChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    position: int | None = Field(None, ge=1, le=2**31, description="The run's new place in the queue (1 starts next); "
                                                                    "it must lie among the runs of its priority. A "
                                                                    "member's run passes only that member's own runs.")
    priority: int | None = Field(None, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT,
                                 description="The run's new priority (higher starts first); applied before `position`. "
                                             "Admins only.")

    @model_validator(mode="after")
    def _something(self) -> "QueueChange":
        if self.position is None and self.priority is None:
            raise ValueError("give position (1 starts next) or priority (higher starts first), or both")
        return self


def _queued(run: dict[str, Any]) -> QueuedRun:
    return QueuedRun(**{name: run.get(name) for name in QueuedRun.model_fields if name != "queued_at"},
                     queued_at=run["started_at"])


def _active(orchestrator: Any, store: Any, run_id: int) -> ActiveRun | None:
    try:
        live = orchestrator.run_snapshot(run_id)
    except RunNotFound:
        return None  # deleted since it was listed
    row = store.get_run(run_id) or {}
    return ActiveRun(id=run_id, display_name=live.get("display_name"), model_name=live.get("model_name") or "",
                     owner=row.get("owner"), devices=live.get("devices"), started_at=live.get("started_at"),
                     phase=live.get("phase") or "", step=live.get("step") or 0, total_steps=live.get("total_steps"))


def queue_answer(state: Any) -> QueueAnswer:
    """This server's active runs (live numbers) and every queued run of the database."""
    active = [_active(state.orchestrator, state.store, run_id) for run_id in state.orchestrator.active_run_ids()]
    return QueueAnswer(active=[a for a in active if a is not None], queued=[_queued(r) for r in state.store.queued_runs()])


@router.get("/api/queue", response_model=QueueAnswer)
def get_queue(request: Request) -> QueueAnswer:
    """The runs training now and the runs waiting for devices, with each queued run's
    position, priority, owner and requested devices."""
    return queue_answer(request.app.state)


@router.post("/api/runs/{run_id}/queue", response_model=QueueAnswer, responses=error_responses(403, 404, 409, 422))
def change_queue(request: Request, run_id: RunId, body: QueueChange) -> QueueAnswer:
    """Change a queued run's priority and/or place; answers the queue as it now stands.
    Priority is an admin's to set; a member moves its run only among its own runs (403
    otherwise). 409 when the run is no longer queued (it started, or was cancelled)."""
    store = request.app.state.store
    caller = caller_of(request)
    member = None if caller.role == "admin" else caller.key_name
    if body.priority is not None and member is not None:
        raise ApiError(403, "admin_required", f"the member key {caller.shown!r} may not set a priority: priorities decide "
                                              "whose runs start first across the team, so only an admin sets them; move "
                                              "your run among your own queued runs with `position`, or ask an admin",
                       field="priority")
    try:
        if body.priority is not None:
            store.set_queue_priority(run_id, body.priority)
        if body.position is not None:
            store.move_queued(run_id, body.position, mover=member)
    except RunNotQueued as exc:
        hint = f"; stop it with POST /api/runs/{run_id}/stop" if exc.status == "running" else ""
        raise ApiError(409, "not_queued", f"{exc}{hint}") from None
    except QueueJump as exc:
        raise ApiError(403, "queue_jump_forbidden", str(exc), field="position") from None
    return queue_answer(request.app.state)
