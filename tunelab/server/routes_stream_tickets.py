"""`POST /api/stream-tickets`: a short-lived ticket that opens one progress stream.

A browser's EventSource cannot send the Authorization header, so the page asks here (with
the header) for a ticket and opens the stream with `?ticket=`; the token never travels in
a URL. What a ticket may open, for how long and for whom: tunelab.server.stream_tickets.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from tunelab.server.roles import caller_of
from tunelab.server.run_ids import MAX_RUN_ID
from tunelab.server.schemas import error_responses

router = APIRouter(prefix="/api", tags=["training"], responses=error_responses(401))
TRAIN_STREAM = "/api/train/progress"


class TicketRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: int | None = Field(None, ge=1, le=MAX_RUN_ID, description=(
        "The run whose stream (`/api/runs/{run_id}/progress`) the ticket opens; null or left out: "
        "`/api/train/progress`, the stream of the run that trains now."))


class TicketAnswer(BaseModel):
    ticket: str = Field(description="Opaque; opens `url` once. Treat it as a secret until it is used.")
    expires_in: float = Field(description="Seconds left to open the stream; once open, it lasts while it is read.")
    url: str = Field(description="The stream's path with the ticket, for `new EventSource(url)`.")


@router.post("/stream-tickets", response_model=TicketAnswer, responses=error_responses(404, 422))
def issue_stream_ticket(request: Request, body: TicketRequest | None = None) -> TicketAnswer:
    """A single-use ticket (60 s to use it) that opens one progress stream as the caller:
    pass it as `?ticket=` where a client cannot send headers (a browser's EventSource). The
    stream's own role rule still applies when it opens; a revoked key's tickets open nothing."""
    state = request.app.state
    run_id = body.run_id if body is not None else None
    if run_id is not None:
        state.orchestrator.view(run_id)  # 404 for a run that does not exist, before any ticket
    path = TRAIN_STREAM if run_id is None else f"/api/runs/{run_id}/progress"
    caller = caller_of(request)
    ticket = state.stream_tickets.issue(role=caller.role, key_name=caller.key_name, key_hash=caller.key_hash,
                                        path=path)
    return TicketAnswer(ticket=ticket, expires_in=state.stream_tickets.ttl_s, url=f"{path}?ticket={ticket}")
