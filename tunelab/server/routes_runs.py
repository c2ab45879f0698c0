"""`/api/runs`: the run history — list, detail, rename, delete, resume.

A resumed run's detail also carries the steps of the runs it continues
(`tunelab.orchestrator.resume_chain`), each shown only to a caller who may read that run (roles.py).

Deleting a run's files is the one place the API removes things from disk, so it is
guarded: the folder must lie inside the outputs root (symlinks resolved, by `paths`), no
other run may use it (a resumed run shares its parent's folder) and it may hold no other
run's export; besides its folder only the export folders recorded as the run's own go
(`tunelab.folder_owners`). A run being exported, evaluated or answered with cannot be
deleted (409 naming the use, server/run_uses.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from tunelab import paths
from tunelab.folder_owners import own_exports, writers_touching
from tunelab.orchestrator import NotResumable
from tunelab.orchestrator.resume import check_resumable
from tunelab.orchestrator.resume_chain import earlier_runs, metric_rows_until
from tunelab.server.errors import ApiError
from tunelab.server.queue_cap import require_queue_room
from tunelab.server.roles import caller_of, may_read_run
from tunelab.server.routes_train import settle
from tunelab.server.run_ids import RunId
from tunelab.server.run_uses import RunInUse
from tunelab.server.schemas import (
    DeleteAnswer,
    EarlierRun,
    JobAnswer,
    RenameRequest,
    ResumeRequest,
    RunDetail,
    RunList,
    RunMetrics,
    RunSummary,
    error_responses,
)
from tunelab.server.user_paths import check_stored_config
from tunelab.store import METRIC_FIELDS, RunNotFound, Store

router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401))


def can_resume(store: Store, run_id: int) -> bool:
    """The orchestrator's own rule (error or unfinished stop, once, valid checkpoint)."""
    try:
        check_resumable(store, run_id)
    except NotResumable:
        return False
    return True


def _summary_fields(store: Store, run: dict[str, Any]) -> dict[str, Any]:
    fields = {name: run.get(name) for name in RunSummary.model_fields if name != "can_resume"}
    return {**fields, "can_resume": can_resume(store, run["id"])}


def _require_run(request: Request, run_id: int) -> dict[str, Any]:
    run = request.app.state.store.get_run(run_id)
    if run is None:
        raise RunNotFound(run_id)
    return run


def _paired_metrics(store: Store, run_id: int, until_step: int | None = None) -> RunMetrics:
    rows, extras = metric_rows_until(store, run_id, until_step)
    return RunMetrics(steps=[r["step"] for r in rows], **{f: [r[f] for r in rows] for f in METRIC_FIELDS}, extra=extras)


def _earlier_runs(request: Request, run: dict[str, Any]) -> list[EarlierRun]:
    """The runs `run` resumed from, as far back as the caller may read each."""
    store, caller = request.app.state.store, caller_of(request)
    return [EarlierRun(run_id=part.run["id"], display_name=part.run.get("display_name"), status=part.run["status"],
                       until_step=part.until_step, metrics=_paired_metrics(store, part.run["id"], part.until_step))
            for part in earlier_runs(store, run, may_read=lambda row: may_read_run(caller, row))]


@router.get("", response_model=RunList, responses=error_responses(422))
def list_runs(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> RunList:
    """Runs, newest first, each with its loss sparkline and whether it can be resumed."""
    store = request.app.state.store
    runs = [RunSummary(**_summary_fields(store, r)) for r in store.list_runs(limit=limit, offset=offset)]
    return RunList(runs=runs, total=store.count_runs(), limit=limit, offset=offset)


@router.get("/{run_id}", response_model=RunDetail, responses=error_responses(404, 422))
def get_run(request: Request, run_id: RunId) -> RunDetail:
    """One run: its record, its settings (without secrets) and every metric by step (the
    extra ones as series of their own); for a resumed run also the steps of the runs it
    continues (`earlier_runs`), so the whole curve can be drawn."""
    run = _require_run(request, run_id)
    metrics = _paired_metrics(request.app.state.store, run_id)
    return RunDetail(**_summary_fields(request.app.state.store, run), config=run["config"], metrics=metrics,
                     earlier_runs=_earlier_runs(request, run))


@router.patch("/{run_id}", response_model=RunSummary, responses=error_responses(404, 422))
def rename_run(request: Request, run_id: RunId, body: RenameRequest) -> RunSummary:
    store = request.app.state.store
    store.rename_run(run_id, body.display_name)
    return RunSummary(**_summary_fields(store, _require_run(request, run_id)))


@router.delete("/{run_id}", response_model=DeleteAnswer, responses=error_responses(403, 404, 409, 422))
def delete_run(
    request: Request,
    run_id: RunId,
    delete_artifacts: Annotated[bool, Query(description="Also remove the run's output folder and its own export folders.")] = False,
) -> DeleteAnswer:
    """Forget a finished run; with `delete_artifacts=true` also remove its folder, which
    must lie inside the outputs root and belong to no other run (nor hold another run's
    export), and the export folders recorded as its own. 409 while the run is being
    exported, evaluated or answered with."""
    state = request.app.state
    # The lock starts and resumes take: none can begin in a folder while it is removed,
    # and none can slip in between the "no other run uses it" check and the removal.
    with state.start_lock:
        run = _require_run(request, run_id)
        active = state.orchestrator.is_training_active() and state.orchestrator.snapshot().get("run_id") == run_id
        if run["status"] == "running" or active:
            raise ApiError(409, "run_active", f"run {run_id} is still running; stop it first (POST /api/train/stop)")
        try:
            with state.run_uses.deleting(run_id):
                return _delete(state, run, delete_artifacts)
        except RunInUse as exc:
            raise ApiError(409, "run_in_use", str(exc)) from None


def _delete(state: Any, run: dict[str, Any], delete_artifacts: bool) -> DeleteAnswer:
    """Forget `run`, and with `delete_artifacts` remove what it wrote: its folder and the
    export folders recorded as its own (tunelab.folder_owners), nothing of another run's."""
    run_id, folder = run["id"], run["output_dir"] if delete_artifacts else None
    if folder:
        _check_deletable(state.store, run_id, folder)
    exports = own_exports(state.store, run_id) if delete_artifacts else []
    state.inference.unload_run(run_id)  # a model loaded from its folder, idle (an answer would hold the run)
    state.store.delete_run(run_id)
    removed = paths.remove_inside(folder) if folder else False
    gone = [e for e in exports if paths.remove_inside(e)]
    if delete_artifacts:  # the rows of what went: its exports elsewhere, and those in its folder
        inside = [row["folder"] for row in state.store.exports_touching(folder)] if folder else []
        state.store.forget_exports([*gone, *inside])
    return DeleteAnswer(deleted=run_id, artifacts_removed=removed, exports_removed=gone)


def _check_deletable(store: Any, run_id: int, folder: str) -> None:
    root = paths.outputs_root()
    if not paths.is_within(folder, root) or paths.is_within(root, folder):
        raise ApiError(
            403, "path_not_allowed",
            f"run {run_id}'s folder {folder} is outside the outputs root {root}, so tunelab will not delete it; "
            "delete the run without delete_artifacts and remove the folder yourself",
            field="delete_artifacts",
        )
    sharing = store.runs_sharing_output_dir(folder, except_run_id=run_id)
    if sharing:
        raise ApiError(
            409, "output_dir_shared",
            f"run {run_id}'s folder {folder} is also used by run(s) {', '.join(map(str, sharing))}; "
            "delete without delete_artifacts, or delete those runs first",
            field="delete_artifacts",
        )
    others = [w for w in writers_touching(store, folder) if w.what == "export" and w.run_id != run_id]
    if others:
        raise ApiError(
            409, "output_dir_shared",
            f"run {run_id}'s folder {folder} is, holds or lies inside {others[0].describe()}, which a delete of run "
            f"{run_id} must not remove; delete without delete_artifacts, or move that export away first",
            field="delete_artifacts",
        )


@router.post("/{run_id}/resume", response_model=JobAnswer, responses=error_responses(400, 403, 404, 409, 422, 429, 503))
def resume_run(request: Request, run_id: RunId, body: ResumeRequest | None = None) -> JobAnswer:
    """Continue a run that ended in error or was stopped early, from its latest valid
    checkpoint; the step count carries on. A run can be resumed once (again when its
    continuation was deleted, cancelled, or failed before a newer checkpoint). Secrets
    the run used (its config's `secrets_used`) must be given again in the body or the
    server's environment; a missing one is a 422 naming it. 429 while the run's owner
    already has the server's cap of runs waiting in the queue."""
    state = request.app.state
    run = _require_run(request, run_id)
    check_stored_config(run, state, role=caller_of(request).role)
    with state.start_lock:
        # The continuation is the same run going on: it keeps its owner, whoever resumed it.
        require_queue_room(state, run.get("owner"))
        settle(state.orchestrator)
        new_run_id = state.orchestrator.resume(run_id, body.secrets() if body else None, owned_by=run.get("owner"))
    return JobAnswer.of(state.orchestrator, new_run_id)
