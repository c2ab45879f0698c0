"""`POST /api/runs/{run_id}/speak`: text in, audio/wav out, from a finished text-to-speech run.

Thin, as the eval route is: `tunelab.inference.speak` checks the request here (a run that is
not text-to-speech gets 409 saying so) and runs the synthesis in a child process (this
server never imports torch) on a device no training run holds, on a thread
(`speak_job.SpeakJob`). One request speaks at a time, since it holds a model in memory; a
second meanwhile gets 409.

It answers the wav when it is made (seconds to a minute), or, with `?stream=true`, a
stream of JSON lines as it goes — `{"type": "progress", "message", "tokens", "max_tokens",
"elapsed_s"}` (tokens: audio tokens written so far, where the model says), then
`{"type": "done", "media_type": "audio/wav", "audio_base64"}` or `{"type": "error",
"status", "error": {code, message, field?}}` — which the page shows as a progress bar.
Either way, a client that goes away (the page's Cancel, a closed tab) ends the speaking:
the child is ended within a fraction of a second and the next request is served.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
from typing import Annotated, Any, AsyncIterator, Callable

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from tunelab.inference.devices import DeviceBusy
from tunelab.inference.speak import PreparedSpeech, SpeakCancelled, SpeakFailed, SpeakOptions, prepare_speech
from tunelab.inference.target import TargetInputError, TargetNotFound, TargetRefused
from tunelab.server.errors import ApiError
from tunelab.server.roles import caller_of
from tunelab.server.run_ids import RunId
from tunelab.server.run_uses import RunBeingDeleted
from tunelab.server.schemas import error_responses
from tunelab.server.speak_job import Finished, SpeakJob, progress_line
from tunelab.server.user_paths import check_opt_ins

log = logging.getLogger("tunelab.server")
router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401))
_one_at_a_time = threading.Lock()
DISCONNECT_POLL_S = 0.25


def _api_error(exc: BaseException) -> ApiError:
    """The HTTP answer for what ended a speaking (an ApiError from a route's own check passes through)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, TargetNotFound):
        return ApiError(404, "run_not_found", str(exc))
    if isinstance(exc, TargetInputError):
        return ApiError(422, "invalid_input", str(exc), field=exc.field)
    if isinstance(exc, (TargetRefused, DeviceBusy)):
        return ApiError(409, "not_speakable", str(exc))
    if isinstance(exc, SpeakCancelled):
        return ApiError(409, "speak_cancelled", str(exc))
    if isinstance(exc, SpeakFailed):
        return ApiError(500, "speak_failed", str(exc))
    log.error("speaking failed", exc_info=exc)
    return ApiError(500, "speak_failed", f"speaking failed: {type(exc).__name__}")


def _checked(request: Request, run_id: int, body: SpeakOptions) -> tuple[PreparedSpeech, Callable[[], None]]:
    """Every check, holding the one-at-a-time lock and the run (released on any refusal);
    the release, for the job to call when it ends."""
    run = request.app.state.store.get_run(run_id)
    if run is None:
        raise ApiError(404, "run_not_found", f"there is no run {run_id}; list runs with GET /api/runs")
    # Loading the model runs any code the run trusted.
    check_opt_ins(run["config"], request.app.state, run_id, action="speak", fields=("trust_remote_code",),
                  role=caller_of(request).role)
    if not _one_at_a_time.acquire(blocking=False):
        raise ApiError(409, "speak_running", "another text is being spoken; try again when it has finished")
    try:
        let_go = request.app.state.run_uses.begin(run_id, "speak")
    except RunBeingDeleted as exc:
        _one_at_a_time.release()
        raise ApiError(409, "run_deleting", str(exc)) from None

    def release() -> None:
        let_go()
        _one_at_a_time.release()

    try:
        return prepare_speech(request.app.state.store, run_id, body), release
    except BaseException as exc:
        release()
        raise _api_error(exc) from None


async def _whole(request: Request, job: SpeakJob) -> bytes:
    """The wav, or the ApiError; the client going away cancels the job."""
    async for item in job.updates(DISCONNECT_POLL_S):
        if isinstance(item, Finished):
            if item.error is not None:
                raise _api_error(item.error) from None
            return item.wav or b""
        if await request.is_disconnected():
            job.abandon()
    raise AssertionError("a speak job ends with Finished")


async def _lines(job: SpeakJob) -> AsyncIterator[bytes]:
    """The progress stream, ending with the wav or the error. Starlette stops sending it
    when the client goes away; the response's background task then abandons the job."""
    async for item in job.updates(DISCONNECT_POLL_S):
        if item is None:
            continue
        line: dict[str, Any]
        if isinstance(item, Finished):
            if item.error is not None:
                error = _api_error(item.error)
                body = {"code": error.code, "message": error.message, **({"field": error.field} if error.field else {})}
                line = {"type": "error", "status": error.status, "error": body}
            else:
                line = {"type": "done", "media_type": "audio/wav", "audio_base64": base64.b64encode(item.wav or b"").decode()}
        else:
            line = progress_line(job, item)
        yield (json.dumps(line) + "\n").encode()


@router.post("/{run_id}/speak", response_class=Response, responses={
    200: {"content": {"audio/wav": {}, "application/x-ndjson": {}},
          "description": "The speech, a wav at the codec's rate; with stream=true, JSON lines of progress ending in the wav."},
    **error_responses(403, 404, 409, 422, 500)})
async def speak(request: Request, run_id: RunId, body: SpeakOptions,
                stream: Annotated[bool, Query(description="Answer JSON lines of progress (audio tokens written, seconds) "
                                                          "ending in the wav as base64, instead of the wav alone.")] = False) -> Response:
    """Speak `text` with a completed or stopped text-to-speech run (or `checkpoint` N of it).
    Closing the connection ends the speaking."""
    job = SpeakJob(*await asyncio.to_thread(_checked, request, run_id, body))
    if stream:
        # The background task runs once the response is over, however it ended (even before
        # its first line): a job still speaking then has lost its client.
        return StreamingResponse(_lines(job), media_type="application/x-ndjson", headers={"Cache-Control": "no-store"},
                                 background=BackgroundTask(job.abandon))
    return Response(await _whole(request, job), media_type="audio/wav")
