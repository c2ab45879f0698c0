"""`POST /api/runs/{run_id}/push`: a run's export, model card and loss plot to the Hugging Face Hub.

The route is thin: `tunelab.push` checks the input, asks the Hub about the token, finds
or writes the export and uploads everything in one commit. It answers when the push has
landed (or with why it did not); a push that must export first takes the export lock
(`routes_export`), so it waits its turn with the exports, and holds the run so it cannot
be deleted meanwhile (server/run_uses.py). Like exporting, pushing is the run's owner's
or an admin's (roles.py: OWN_RUN).

The token travels in the request body, never in the URL, and only for this push: it is
not stored, logged or echoed. The server's own HF_TOKEN is deliberately not used: it
would let every member push under the server owner's account.
"""

from __future__ import annotations

import logging
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from tunelab.server.errors import ApiError
from tunelab.server.roles import caller_of
from tunelab.server.routes_export import export_api_error, one_export_at_a_time
from tunelab.server.run_ids import RunId
from tunelab.server.run_uses import held
from tunelab.server.schemas import error_responses
from tunelab.server.user_paths import check_opt_ins

log = logging.getLogger("tunelab.server")
router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401))
# How each kind of PushError is answered (tunelab.push.checks).
STATUS_OF = {"input": (422, "invalid_input"), "refused": (409, "hub_refused"), "not_found": (404, "run_not_found"),
             "offline": (409, "hub_offline"), "failed": (502, "hub_failed")}


class PushRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repo_id: str = Field(max_length=200, description="The Hub repo, owner/name (created if it does not exist; an existing "
                                                     "one of yours gets a new commit).")
    token: SecretStr | None = Field(None, max_length=500, description="A Hugging Face access token with write access. Used "
                                                                      "for this push only: never stored or logged.")
    private: bool = Field(False, description="Create the repo private (an existing repo keeps its visibility).")
    format: Literal["adapter", "merged", "gguf"] = Field(
        "adapter", description="Which export to push; the run is exported first (default folder and settings) if it has "
                               "no export of this format.")


class PushAnswer(BaseModel):
    repo_id: str
    repo_url: str
    commit_url: str
    created: bool = Field(description="The push created the repo (false: it added a commit to an existing repo).")
    private: bool
    format: str
    export_folder: str = Field(description="The export folder on the server whose files were pushed.")
    exported_now: bool = Field(description="The run had no export of this format, so the push wrote one first.")
    files: list[str] = Field(description="Every file the commit wrote, README.md (the model card) and the loss plot included.")


@router.post("/{run_id}/push", response_model=PushAnswer, responses=error_responses(403, 404, 409, 422, 500, 502))
def push(request: Request, run_id: RunId, body: PushRequest) -> PushAnswer:
    """Push the run's export (written first if missing) with a model card to the Hub, in
    one commit. Blocks until the push has landed; a bad token or repo id is a 422 naming
    the field, with nothing created on the Hub."""
    # Imported by the first push, not with the server (its start-up is timed).
    from tunelab.export import ExportError, export_run
    from tunelab.push import PushError, push_run

    store = request.app.state.store
    run = store.get_run(run_id)
    if run is not None and body.format != "adapter":
        # Merging and GGUF load the model, and with it any code the run trusted.
        check_opt_ins(run["config"], request.app.state, run_id, action="export", fields=("trust_remote_code",),
                      role=caller_of(request).role)

    def export():
        if not one_export_at_a_time.acquire(blocking=False):
            raise ApiError(409, "export_running", "another export is being written; try again when it has finished")
        try:
            return export_run(store, run_id, body.format)
        finally:
            one_export_at_a_time.release()

    token = body.token.get_secret_value() if body.token is not None else None
    try:
        with held(request, run_id, "push"):
            result = push_run(store, run_id, body.repo_id, token, fmt=body.format, private=body.private,
                              token_hint="put it in the request's token field", export=export)
    except PushError as exc:
        status, code = STATUS_OF[exc.kind]
        if exc.kind == "failed":
            log.warning("push of run %s failed: %s", run_id, exc)
        raise ApiError(status, code, str(exc), field=exc.field) from None
    except ExportError as exc:
        raise export_api_error(exc, run_id) from None
    return PushAnswer(**result.describe())
