"""`/api/runs/{id}/exports` and their downloads: take a run's exported model away over HTTP.

Only folders recorded in the store as this run's exports (`run_exports`, written by
`tunelab.export`) are served, and only files inside them with every symlink resolved
(`paths.is_within`): a `..`, an absolute path or a symlink pointing out of the folder
reaches nothing. One file comes as itself, with HTTP ranges (starlette's FileResponse
answers `Range` with 206, so an interrupted download resumes); a whole folder comes as
a zip written while it is sent (stored, not compressed: weights do not shrink, and
nothing is staged on disk or held in memory).

Listing is READ, like the run itself; downloading is OWN_RUN (roles.py): exports are the
model's weights, so a member takes away only its own runs' exports, an admin any, and a
viewer, who only reads, none.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Annotated, Iterator

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, Field

from tunelab import paths
from tunelab.server.errors import ApiError
from tunelab.server.routes_runs import _require_run
from tunelab.server.run_ids import RunId
from tunelab.server.schemas import error_responses

router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401))
ZIP_CHUNK = 1 << 20


class ExportFile(BaseModel):
    path: str = Field(description="Relative to the export folder, '/'-separated.")
    size_bytes: int


class ExportFolder(BaseModel):
    folder: str = Field(description="The export folder on the server; pass it as `folder` to the download route.")
    format: str
    created_at: float
    files: list[ExportFile]


class ExportList(BaseModel):
    exports: list[ExportFolder] = Field(description="The run's export folders that still exist, oldest first.")


def _files(folder: Path) -> list[ExportFile]:
    found = []
    for file in sorted(folder.rglob("*")):
        if file.is_file() and paths.is_within(file, folder):
            found.append(ExportFile(path=file.relative_to(folder).as_posix(), size_bytes=file.stat().st_size))
    return found


@router.get("/{run_id}/exports", response_model=ExportList, responses=error_responses(404, 422))
def list_exports(request: Request, run_id: RunId) -> ExportList:
    """The run's exports: each recorded folder with its files (download them with
    GET /api/runs/{run_id}/exports/download)."""
    _require_run(request, run_id)
    exports = []
    for row in request.app.state.store.exports_of_run(run_id):
        folder = Path(row["folder"])
        if paths.is_dir(folder):
            exports.append(ExportFolder(folder=str(folder), format=row["format"], created_at=row["created_at"], files=_files(folder)))
    return ExportList(exports=exports)


def _export_folder(request: Request, run_id: int, folder: str) -> Path:
    """`folder` if it is one of the run's recorded export folders (compared resolved), else 404."""
    _require_run(request, run_id)
    try:
        wanted = os.path.realpath(folder)
    except ValueError:  # a NUL byte: no folder has that name
        wanted = None
    for row in request.app.state.store.exports_of_run(run_id):
        if row["folder"] == wanted and paths.is_dir(wanted):
            return Path(wanted)
    raise ApiError(404, "export_not_found", f"folder: {paths.shown(folder)} is not an export of run {run_id}; "
                                            f"GET /api/runs/{run_id}/exports lists its export folders", field="folder")


class _Sink:
    """What zipfile writes into: it hands the written bytes to the generator in chunks.
    It has no tell() or seek(), so zipfile writes a streamable archive (data descriptors)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


def zip_stream(folder: Path, names: list[str]) -> Iterator[bytes]:
    """The files `names` (relative, checked by the caller) of `folder` as one zip,
    produced piece by piece as it is read."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:  # type: ignore[arg-type]
        for name in names:
            with open(folder / name, "rb") as source, archive.open(name, "w", force_zip64=True) as target:
                while chunk := source.read(ZIP_CHUNK):
                    target.write(chunk)
                    yield sink.take()
            yield sink.take()
    yield sink.take()


def zip_response(stream: Iterator[bytes], name: str) -> StreamingResponse:
    """A zip sent as it is written (no length known up front, so no ranges)."""
    return StreamingResponse(stream, media_type="application/zip", headers={"Content-Disposition": f'attachment; filename="{name}"'})


@router.get("/{run_id}/exports/download", response_class=FileResponse,
            responses={**error_responses(403, 404, 422), 200: {"content": {"application/octet-stream": {}, "application/zip": {}}},
                       206: {"description": "The byte range asked for with Range (one file only)."}})
def download_export(request: Request, run_id: RunId,
                    folder: Annotated[str, Query(max_length=4096, description="An export folder of the run, as GET /api/runs/{run_id}/exports lists it.")],
                    file: Annotated[str | None, Query(max_length=4096, description="One file, relative to the folder; omit it for the whole folder as a zip.")] = None):
    """One file of an export (ranges supported, so a download resumes), or the whole
    export folder as a zip. Only the run's owner or an admin may download."""
    root = _export_folder(request, run_id, folder)
    if file is None:
        name = f"run-{run_id}-{paths.slug(root.name)}.zip"
        return zip_response(zip_stream(root, [f.path for f in _files(root)]), name)
    target = root / file
    if not target.is_file() or not paths.is_within(target, root):
        raise ApiError(404, "export_file_not_found", f"file: {paths.shown(file)} is not a file of the export {paths.shown(str(root))}; "
                                                     f"GET /api/runs/{run_id}/exports lists its files", field="file")
    # The resolved file is served: what was checked is what is read.
    return FileResponse(os.path.realpath(target), filename=Path(file).name, media_type="application/octet-stream")
