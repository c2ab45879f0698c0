"""`POST /api/runs/{run_id}/export`: export a finished run as an adapter, merged weights or GGUF.

The route is thin: `tunelab.export` decides what may be exported and where, and does the
heavy part in a child process (this server never imports torch). Exports write only
inside the outputs root, and never into a folder another owner's run wrote
(`tunelab.folder_owners`; the folder is recorded with its run and owner). One export runs
at a time, since a merge holds a whole model in memory; a second request meanwhile gets
409. While it runs, the run cannot be deleted (server/run_uses.py).
"""

from __future__ import annotations

import logging
import threading
from typing import Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from tunelab.config.text import PathText
from tunelab.server.errors import ApiError
from tunelab.server.roles import caller_of
from tunelab.server.run_ids import RunId
from tunelab.server.run_uses import held
from tunelab.server.schemas import error_responses
from tunelab.server.user_paths import check_opt_ins

log = logging.getLogger("tunelab.server")
router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401))
one_export_at_a_time = threading.Lock()


class ExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["adapter", "merged", "gguf", "gguf-adapter"] = Field(
        "adapter", description="adapter: copy the LoRA adapter; merged: base + adapter folded into one model; gguf: one llama.cpp file "
                   "(from llama.cpp's converter) and an Ollama Modelfile; gguf-adapter: a LoRA run's adapter alone as a llama.cpp "
                   "adapter GGUF (llama-cli --lora, Ollama ADAPTER).")
    dest: PathText | None = Field(None, min_length=1, max_length=4096,
                                  description="Folder inside the outputs root (relative paths start there). Default: <run folder>/export-<format>; "
                                              "a resumed run, which shares the folder of the run it continues: <run folder>/run-<id>-export-<format>. "
                                              "A folder holding files is refused unless this run or another run of its owner wrote them "
                                              "(409 naming who did).")
    dtype: Literal["float16", "bfloat16", "float32"] | None = Field(
        None, description="Weight type of merged and gguf exports (default: the run's training half type, bf16 runs bfloat16, else float16); an adapter is copied as trained.")
    quant: Literal["q8_0", "q4_k_m", "q5_k_m", "q6_k"] | None = Field(
        None, description="gguf only: a quantised file (q8_0 from llama.cpp's converter, the k-quants from llama.cpp's quantizer); "
                          "default: a float GGUF in dtype.")


class ExportAnswer(BaseModel):
    run_id: int
    format: str
    dtype: str | None
    quant: str | None = Field(None, description="The GGUF quantisation, if one was chosen.")
    kind: str = Field(description="What the run trained: adapter, full, mlx_adapter or mlx_full.")
    source: str = Field(description="The folder the weights came from (the run folder, or a stopped run's checkpoint).")
    step: int | None = Field(description="The checkpoint's step when a stopped run was exported, else null.")
    dest: str
    files: list[str]


@router.post("/{run_id}/export", response_model=ExportAnswer, responses=error_responses(403, 404, 409, 422, 500))
def export(request: Request, run_id: RunId, body: ExportRequest | None = None) -> ExportAnswer:
    """Export a completed run (or a stopped run's checkpoint). Blocks until the export is
    written; merging a large model can take minutes."""
    # The exporter is imported by the first export, not with the server (its start-up is timed).
    from tunelab.export import ExportError, export_run

    body = body or ExportRequest()
    run = request.app.state.store.get_run(run_id)
    if run is not None and body.format != "adapter":
        # Merging and GGUF load the model, and with it any code the run trusted.
        check_opt_ins(run["config"], request.app.state, run_id, action="export", fields=("trust_remote_code",),
                      role=caller_of(request).role)
    if not one_export_at_a_time.acquire(blocking=False):
        raise ApiError(409, "export_running", "another export is being written; try again when it has finished")
    try:
        with held(request, run_id, "export"):
            result = export_run(request.app.state.store, run_id, body.format, dest=body.dest, dtype=body.dtype, quant=body.quant)
    except ExportError as exc:
        raise export_api_error(exc, run_id) from None
    finally:
        one_export_at_a_time.release()
    return ExportAnswer(**result.describe())


def export_api_error(exc: Exception, run_id: int) -> ApiError:
    """The HTTP answer to an ExportError (also for a push that had to export first)."""
    from tunelab.export import ExportFailed, ExportInputError, ExportRefused, FolderNotOwned

    if isinstance(exc, ExportInputError):
        return ApiError(422, "invalid_input", str(exc), field=exc.field)
    if isinstance(exc, FolderNotOwned):
        return ApiError(409, "folder_not_owned", str(exc), field=exc.field)
    if isinstance(exc, ExportRefused):
        if exc.not_found:
            return ApiError(404, "run_not_found", f"there is no run {run_id}; list runs with GET /api/runs")
        return ApiError(409, "not_exportable", str(exc))
    if isinstance(exc, ExportFailed):
        log.error("export of run %s failed: %s", run_id, exc)
    return ApiError(500, "export_failed", str(exc))
