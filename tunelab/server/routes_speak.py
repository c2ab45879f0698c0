"""`POST /api/runs/{run_id}/speak`: text in, audio/wav out, from a finished text-to-speech run.

Thin, as the eval route is: `tunelab.inference.speak` checks the request and runs the
synthesis in a child process (this server never imports torch) on a device no training
run holds. It blocks until the wav is made (seconds for the demo model). One request
speaks at a time, since it holds a model in memory; a second meanwhile gets 409. A run
that is not text-to-speech (modality tts) gets 409 saying so.
"""

from __future__ import annotations

import logging
import threading

from fastapi import APIRouter, Request
from fastapi.responses import Response

from tunelab.inference.devices import DeviceBusy
from tunelab.inference.speak import SpeakFailed, SpeakOptions, speak_run
from tunelab.inference.target import TargetInputError, TargetNotFound, TargetRefused
from tunelab.server.errors import ApiError
from tunelab.server.roles import caller_of
from tunelab.server.run_ids import RunId
from tunelab.server.run_uses import held
from tunelab.server.schemas import error_responses
from tunelab.server.user_paths import check_opt_ins

log = logging.getLogger("tunelab.server")
router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401))
_one_at_a_time = threading.Lock()


@router.post("/{run_id}/speak", response_class=Response, responses={
    200: {"content": {"audio/wav": {}}, "description": "The speech, a wav at the codec's rate."},
    **error_responses(403, 404, 409, 422, 500)})
def speak(request: Request, run_id: RunId, body: SpeakOptions) -> Response:
    """Speak `text` with a completed or stopped text-to-speech run (or `checkpoint` N of it)."""
    run = request.app.state.store.get_run(run_id)
    if run is None:
        raise ApiError(404, "run_not_found", f"there is no run {run_id}; list runs with GET /api/runs")
    # Loading the model runs any code the run trusted.
    check_opt_ins(run["config"], request.app.state, run_id, action="speak", fields=("trust_remote_code",),
                  role=caller_of(request).role)
    if not _one_at_a_time.acquire(blocking=False):
        raise ApiError(409, "speak_running", "another text is being spoken; try again when it has finished")
    try:
        with held(request, run_id, "speak"):
            wav = speak_run(request.app.state.store, run_id, body)
    except TargetNotFound as exc:
        raise ApiError(404, "run_not_found", str(exc)) from None
    except TargetInputError as exc:
        raise ApiError(422, "invalid_input", str(exc), field=exc.field) from None
    except (TargetRefused, DeviceBusy) as exc:
        raise ApiError(409, "not_speakable", str(exc)) from None
    except SpeakFailed as exc:
        log.error("speaking with run %s failed: %s", run_id, exc)
        raise ApiError(500, "speak_failed", str(exc)) from None
    finally:
        _one_at_a_time.release()
    return Response(wav, media_type="audio/wav")
