"""`/api/train`: check or start a run; stop, reset and watch the run that trains here now.

Every view here (status, metrics, progress, plot, stop, reset) is about the run that
trains on this server now, or the last one that did; never a queued run, which the
orchestrator does not make its current run until it starts. Each answer names its run
(`run_id`; the plot in its X-Tunelab-Run-Id header), and a stop acts only on the run the
role check looked at. The per-run routes (/api/runs/{id}/...) address any run.

Routes are thin: the orchestrator decides and raises (RunActive, RunMismatch, ...), and
the error handlers turn its exceptions into the API's error shape. Routes that block
(spawning a process, writing the database, drawing a plot) are plain `def`s, which
FastAPI runs in its thread pool so the event loop keeps streaming progress meanwhile.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response

from tunelab.config.run_config import RunConfig, parse_config
from tunelab.orchestrator import RunMismatch
from tunelab.server.queue_cap import require_queue_room
from tunelab.server.roles import CHECKED_RUN_SCOPE_KEY, caller_of
from tunelab.server.schemas import (
    CheckAnswer,
    JobAnswer,
    MetricsAnswer,
    StartRequest,
    StopAnswer,
    StopRequest,
    TrainStatus,
    error_responses,
)
from tunelab.server.sse import ProgressStream, requested_resume
from tunelab.server.user_paths import check_output_dir_owned, check_resume_owned, checked_config

router = APIRouter(prefix="/api/train", tags=["training"], responses=error_responses(401))
RUN_ID_HEADER = "X-Tunelab-Run-Id"
# How long a start waits for an ended run's event pump to finish draining.
SETTLE_TIMEOUT_S = 5.0


def settle(orchestrator: Any) -> None:
    """A run that has ended may still be draining its event pump for a moment. A client
    that has just seen `complete` should be able to start the next run at once, so wait
    for that instead of answering 409 (an active run is refused without waiting)."""
    if not orchestrator.is_training_active():
        orchestrator.wait_idle(SETTLE_TIMEOUT_S)


def _status(snapshot: dict) -> TrainStatus:
    return TrainStatus(**{**snapshot, "job_id": snapshot.get("run_id")})


@router.post("/start", response_model=JobAnswer, responses=error_responses(403, 409, 422, 429, 503))
def start(body: StartRequest, request: Request) -> JobAnswer:
    """Start a run. With `start_request_id`, a retried request never starts a second run:
    it answers the job the first one started (`duplicate: true`). 429 while the calling key
    already has the server's cap of runs waiting in the queue."""
    state = request.app.state
    request_id = body.start_request_id
    caller = caller_of(request)
    config = checked_config(parse_config(body.model_dump(exclude={"start_request_id"}, exclude_unset=True)), state,
                            role=caller.role)
    # One start at a time, so a retry racing its original sees the row the original made.
    with state.start_lock:
        if request_id:
            existing = state.store.find_by_start_request_id(request_id)
            if existing is not None:
                return JobAnswer.of(state.orchestrator, existing["id"], existing["status"], duplicate=True)
        require_queue_room(state, caller.key_name)
        check_output_dir_owned(config, state.store, caller.key_name)  # under the lock a delete takes too
        check_resume_owned(config, state.store, caller.role, caller.key_name)
        settle(state.orchestrator)
        run_id = state.orchestrator.start(config, start_request_id=request_id, owned_by=caller.key_name)
    return JobAnswer.of(state.orchestrator, run_id)


@router.post("/check", response_model=CheckAnswer, responses=error_responses(403, 422))
def check(body: RunConfig, request: Request) -> CheckAnswer:
    """Check a run config as a start would (its settings, paths and opt-ins, for the caller's
    role) and start nothing: 200 with the config a start would store, or the start's 422
    listing every problem. The page checks its form with this."""
    caller = caller_of(request)
    config = checked_config(parse_config(body.model_dump(exclude_unset=True)), request.app.state, role=caller.role)
    check_resume_owned(config, request.app.state.store, caller.role, caller.key_name)
    return CheckAnswer(config=config.public())


@router.post("/stop", response_model=StopAnswer, responses=error_responses(409, 422, 503))
def stop(body: StopRequest, request: Request) -> StopAnswer:
    """Stop the run that trains here now (the one /api/train/status shows; never a queued
    run: withdraw one with POST /api/runs/{id}/stop). `save: true` stops at the next step
    and writes a resumable checkpoint; `save: false` cancels: nothing of the run is kept
    (its folder is removed when it lies inside the outputs root and no other run uses it)
    and it cannot be resumed. A cancel is never undone by a later save."""
    orchestrator = request.app.state.orchestrator
    expected = body.expected_job_id
    if caller_of(request).role != "admin":
        # A member was allowed for the run the role check saw: stop that one and no other,
        # not one started since, nor another it names (whose owner nobody checked).
        checked = request.scope.get(CHECKED_RUN_SCOPE_KEY)
        if expected is not None and expected != checked:
            raise RunMismatch(expected, checked)
        expected = checked
    orchestrator.stop(body.save, expected_run_id=expected)
    snapshot = orchestrator.snapshot()
    return StopAnswer(job_id=snapshot.get("run_id"), run_id=snapshot.get("run_id"), save=body.save,
                      phase=snapshot["phase"])


@router.post("/reset", response_model=TrainStatus, responses=error_responses(409))
def reset(request: Request) -> TrainStatus:
    """Back to `idle` after a finished run (409 while one is active)."""
    orchestrator = request.app.state.orchestrator
    settle(orchestrator)
    orchestrator.reset()
    return _status(orchestrator.snapshot())


@router.get("/status", response_model=TrainStatus)
def status(request: Request) -> TrainStatus:
    """Phase, latest numbers and the chart histories of the run that trains here now (or
    the last one that did); `run_id` says which."""
    return _status(request.app.state.orchestrator.snapshot())


@router.get("/metrics", response_model=MetricsAnswer)
def metrics(request: Request) -> MetricsAnswer:
    """The chart histories of the run /api/train/status shows; `run_id` says which."""
    orchestrator = request.app.state.orchestrator
    run_id = orchestrator.snapshot().get("run_id")
    histories = orchestrator.metrics() if run_id is None else orchestrator.run_metrics(run_id)
    return MetricsAnswer(job_id=run_id, run_id=run_id, histories=histories)


@router.get(
    "/progress",
    response_class=Response,
    responses={200: {"content": {"text/event-stream": {}}, "description": "A Server-Sent Events stream."},
               **error_responses(422)},
)
async def progress(
    request: Request,
    last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    last_event_id: Annotated[str | None, Query(description=(
        "The last event id held, `<run_id>:<step>`: replay that run's later steps, or the current run from "
        "its start when it is another run (same as the Last-Event-ID header; a bare step means the current run)."))] = None,
    ticket: Annotated[str | None, Query(description=(
        "A stream ticket from POST /api/stream-tickets, for EventSource clients that cannot set headers "
        "(the API token itself is never accepted in the URL)."))] = None,
) -> Response:
    """Live progress (Server-Sent Events): `progress` (id = `<run_id>:<step>`), `status`,
    `heartbeat`, then `complete` or `error`. Reconnect with `Last-Event-ID` to get missed steps."""
    del ticket  # checked by the token gate before routing; declared here for the docs
    resume_from = requested_resume(last_event_id_header, last_event_id,
                                   "an event id `<run_id>:<step>` (or a bare step number for the current run), e.g. 7:40")
    state = request.app.state
    return ProgressStream(state.orchestrator, resume_from, state.heartbeat_seconds).response()


@router.get("/plot.png", response_class=Response,
            responses={200: {"content": {"image/png": {}}, "description": "The loss plot."}, **error_responses(422)})
def plot(request: Request, theme: Literal["light", "dark"] = "light") -> Response:
    """The loss plot (raw points and a moving average) of the run /api/train/status shows;
    the X-Tunelab-Run-Id header says which (absent when there is none)."""
    orchestrator = request.app.state.orchestrator
    png = orchestrator.plot_png(theme=theme)
    run_id = orchestrator.snapshot().get("run_id")
    headers = {"Cache-Control": "no-store", **({RUN_ID_HEADER: str(run_id)} if run_id is not None else {})}
    return Response(content=png, media_type="image/png", headers=headers)
