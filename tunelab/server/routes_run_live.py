"""`/api/runs/{run_id}/status`, `/progress` and `/stop`: one run among several.

What `/api/train/*` does for the most recent run, these do for any run: its live state
(or, for a run with no live state here, what its row says: queued with its position,
cancelled, finished), its progress stream, and stop-and-save or cancel — which for a
queued run withdraws it before anything was spawned.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response

from tunelab.server.run_ids import RunId
from tunelab.server.schemas import RunStopAnswer, StopRequest, TrainStatus, error_responses
from tunelab.server.sse import ProgressStream, requested_resume

router = APIRouter(prefix="/api/runs", tags=["runs"], responses=error_responses(401, 404))


@router.get("/{run_id}/status", response_model=TrainStatus)
def run_status(run_id: RunId, request: Request) -> TrainStatus:
    """Phase, latest numbers and chart histories of one run; `queue_position` while it waits."""
    snapshot = request.app.state.orchestrator.run_snapshot(run_id)
    return TrainStatus(**{**snapshot, "job_id": run_id})


@router.post("/{run_id}/stop", response_model=RunStopAnswer, responses=error_responses(409, 422, 503))
def run_stop(run_id: RunId, body: StopRequest, request: Request) -> RunStopAnswer:
    """`save: true` stops at the next step and writes a resumable checkpoint; `save: false`
    cancels (as /api/train/stop). A queued run is withdrawn either way: `cancelled`."""
    orchestrator = request.app.state.orchestrator
    outcome = orchestrator.stop_run(run_id, body.save)
    return RunStopAnswer(job_id=run_id, save=body.save, outcome=outcome,
                         phase=orchestrator.run_snapshot(run_id)["phase"])


@router.get(
    "/{run_id}/progress",
    response_class=Response,
    responses={200: {"content": {"text/event-stream": {}}, "description": "A Server-Sent Events stream."},
               **error_responses(422)},
)
async def run_progress(
    run_id: RunId,
    request: Request,
    last_event_id_header: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    last_event_id: Annotated[str | None, Query(description="The last event id held, `<run_id>:<step>` (as the "
                                                           "Last-Event-ID header): replay this run's later steps.")] = None,
    ticket: Annotated[str | None, Query(description=(
        "A stream ticket from POST /api/stream-tickets, for EventSource clients that cannot set headers "
        "(the API token itself is never accepted in the URL)."))] = None,
) -> Response:
    """Live progress of this run (Server-Sent Events, as /api/train/progress): `status`
    while it waits in the queue, `progress` per step, then `complete` or `error`."""
    del ticket  # checked by the token gate before routing; declared here for the docs
    resume_from = requested_resume(last_event_id_header, last_event_id, f"an event id `<run_id>:<step>`, e.g. {run_id}:40")
    state = request.app.state
    view = state.orchestrator.view(run_id)  # RunNotFound (404) before the stream starts
    return ProgressStream(view, resume_from, state.heartbeat_seconds).response()
