"""`POST /api/runs/{run_id}/eval` and `GET /api/runs/{run_id}/evals`: evaluate a run, and
read its stored evaluations.

The route is thin: `tunelab.evaluate.runner` checks the request and runs the evaluation in
a child process (this server never imports torch) on a device no training run holds.
The POST blocks until every result is stored (seconds for the demo model; minutes for a
large one or many lm-eval examples). One evaluation runs at a time, since it holds a
model in memory; a second request meanwhile gets 409. Paths in the request (a prompts
file, a task folder) must lie in the data roots, as every path a client names.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from tunelab.store.evals import list_evals
from tunelab.evaluate.options import EvalFailed, EvalInputError, EvalNotFound, EvalOptions, EvalRefused
from tunelab.server.roles import caller_of
from tunelab.server.errors import ApiError
from tunelab.server.run_ids import RunId
from tunelab.server.run_uses import held
from tunelab.server.schemas import error_responses
from tunelab.server.user_paths import check_opt_ins
from tunelab.store import RunNotFound

log = logging.getLogger("tunelab.server")
router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401))
_one_eval_at_a_time = threading.Lock()


class EvalRecord(BaseModel):
    id: int
    run_id: int
    created_at: float = Field(description="Unix seconds.")
    kind: str = Field(description="perplexity | generations | lm_eval.")
    payload: dict[str, Any] = Field(description="The result; its fields per kind are in docs/INFERENCE.md (Evaluate).")


class EvalList(BaseModel):
    run_id: int
    running: bool = Field(description="Whether an evaluation is running on this server now (of any run).")
    evals: list[EvalRecord] = Field(description="Newest first.")


def _not_found(run_id: int) -> ApiError:
    return ApiError(404, "run_not_found", f"there is no run {run_id}; list runs with GET /api/runs")


@router.post("/{run_id}/eval", response_model=EvalList, responses=error_responses(403, 404, 409, 422, 500))
def evaluate(request: Request, run_id: RunId, body: EvalOptions | None = None) -> EvalList:
    """Evaluate a completed or stopped run against its base: loss and perplexity on its
    eval split, answers to a prompt set, and lm-eval tasks where lm-eval is installed.
    Blocks until the results are stored; answers with the results of this evaluation."""
    body = body or EvalOptions()
    store = request.app.state.store
    run = store.get_run(run_id)
    if run is None:
        raise _not_found(run_id)
    # Loading the model runs any code the run trusted.
    check_opt_ins(run["config"], request.app.state, run_id, action="eval", fields=("trust_remote_code",),
                  role=caller_of(request).role)
    if not _one_eval_at_a_time.acquire(blocking=False):
        raise ApiError(409, "eval_running", "another evaluation is running; try again when it has finished")
    from tunelab.evaluate.runner import run_eval  # the runner comes with the first evaluation, not the server's start

    try:
        with held(request, run_id, "eval"):
            records = run_eval(store, run_id, body, confined=True)
    except EvalNotFound:
        raise _not_found(run_id) from None
    except EvalInputError as exc:
        raise ApiError(422, "invalid_input", str(exc), field=exc.field) from None
    except EvalRefused as exc:
        raise ApiError(409, "not_evaluable", str(exc)) from None
    except EvalFailed as exc:
        log.error("evaluation of run %s failed: %s", run_id, exc)
        raise ApiError(500, "eval_failed", str(exc)) from None
    finally:
        _one_eval_at_a_time.release()
    return EvalList(run_id=run_id, running=False, evals=list(reversed(records)))


@router.get("/{run_id}/evals", response_model=EvalList, responses=error_responses(404))
def evals(request: Request, run_id: RunId) -> EvalList:
    """The run's stored evaluations, newest first."""
    try:
        records = list_evals(request.app.state.store, run_id)
    except RunNotFound:
        raise _not_found(run_id) from None
    return EvalList(run_id=run_id, running=_one_eval_at_a_time.locked(), evals=records)
