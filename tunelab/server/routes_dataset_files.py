"""`GET /api/datasets` and `POST /api/datasets/upload`: the data files a run may read, and bringing one.

The listing walks the data roots (`paths.data_roots`: the home's datasets, the demo
cache, TUNELAB_DATA_ROOTS; not the outputs root, whose run folders hold JSON of their
own) for .jsonl/.json/.csv/.parquet files, with their size and, for files small enough
to look into quickly, rows and columns (dataset_files.look).

An upload is the file itself as the request body (`?name=` gives its name): it streams
to a hidden file in `<home>/datasets` and is held to TUNELAB_UPLOAD_MAX_MB while it
arrives (RequestGuard refuses a larger declared Content-Length before reading a byte),
and each piece must follow the last within TUNELAB_BODY_TIMEOUT_S.
A body as-is rather than multipart/form-data: nothing is spooled or parsed on the way,
and the page sends a File just as easily. A file past the bound, or one that is not the
data its extension names, is removed and refused (413 / 422); a good one takes its name
without ever replacing a file (a taken name gets a -2, -3, ... suffix).
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import tempfile
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from tunelab import paths
from tunelab.server import dataset_files, slow_clients
from tunelab.server.dataset_files import EXTENSIONS, LOOK_LIMIT_BYTES, NotData
from tunelab.server.errors import ApiError
from tunelab.server.schemas import error_responses

router = APIRouter(prefix="/api/datasets", tags=["datasets"], responses=error_responses(401))
UPLOAD_PATH = "/api/datasets/upload"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._ -]{0,119}$")
MAX_DEPTH = 3
MAX_FILES = 500


class DataFile(BaseModel):
    path: str = Field(description="The file's path on the server: put it in Data files (dataset_path).")
    name: str
    root: str = Field(description="The data root it lies in.")
    size_bytes: int
    rows: int | None = Field(None, description="Rows, when the file was small enough to count quickly.")
    columns: list[str] = Field(default_factory=list)
    problem: str | None = Field(None, description="Why the file cannot be read as data, when it cannot.")


class DataFileList(BaseModel):
    files: list[DataFile]
    upload_folder: str = Field(description="Where uploads go: <home>/datasets.")
    upload_max_bytes: int


@functools.lru_cache(maxsize=1024)
def _look(path: str, _mtime_ns: int, _size: int) -> tuple[int | None, tuple[str, ...], str | None]:
    """One look per version of a file (its mtime and size are part of the key)."""
    try:
        found = dataset_files.look(Path(path))
    except (NotData, OSError) as exc:
        return None, (), str(exc)
    return found.rows, tuple(found.columns), None


def _walk(root: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root):
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < MAX_DEPTH else []
        found += [Path(folder) / f for f in sorted(files) if not f.startswith(".") and f.lower().endswith(EXTENSIONS)]
    return found


def list_files() -> list[DataFile]:
    outputs = os.path.realpath(paths.outputs_root())
    listed: list[DataFile] = []
    for root in dict.fromkeys(paths.data_roots()):
        if str(root) == outputs or not paths.is_dir(root):
            continue
        for file in _walk(root):
            if len(listed) >= MAX_FILES:
                return listed
            if not file.is_file() or not paths.is_within(file, root):
                continue
            stat = file.stat()
            rows, columns, problem = _look(str(file), stat.st_mtime_ns, stat.st_size) if stat.st_size <= LOOK_LIMIT_BYTES else (None, (), None)
            listed.append(DataFile(path=str(file), name=file.name, root=str(root), size_bytes=stat.st_size, rows=rows,
                                   columns=list(columns), problem=problem))
    return listed


@router.get("", response_model=DataFileList)
async def list_datasets(request: Request) -> DataFileList:
    """The data files in the data roots, with size, rows and columns."""
    # Whoever lists the data files (the page, as it opens) is about to check a dataset: the
    # spare preview child starts now, not when the server starts, so a server nobody uses
    # holds no idle process for it.
    await request.app.state.preview_spare.refill()
    files = await asyncio.to_thread(list_files)
    return DataFileList(files=files, upload_folder=str(paths.datasets_root()), upload_max_bytes=dataset_files.upload_max_bytes())


def _checked_name(name: str) -> str:
    if not NAME.match(name) or ".." in name:
        raise ApiError(422, "invalid_input", f"name: {paths.shown(name)} is not a plain file name; use letters, digits, "
                                             "'.', '-', '_' and spaces (no folders), e.g. my-data.jsonl", field="name")
    if not name.lower().endswith(EXTENSIONS):
        raise ApiError(422, "invalid_input", f"name: {paths.shown(name)} has no dataset extension; use one of {', '.join(EXTENSIONS)}",
                       field="name")
    return name


async def _receive_into(request: Request, part: Path, limit: int) -> int:
    """Stream the body into `part`; 413 once it passes `limit` bytes. A large file may
    take long, so the guard's whole-body time limit does not apply; instead each piece
    must come within TUNELAB_BODY_TIMEOUT_S of the last (408 otherwise)."""
    size = 0
    pieces = request.stream().__aiter__()
    with open(part, "wb") as out:
        while True:
            try:
                chunk = await asyncio.wait_for(pieces.__anext__(), slow_clients.body_timeout_s())
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise ApiError(408, "request_timeout", f"file: the upload stalled for {slow_clients.body_timeout_s():g} s "
                                                       f"({slow_clients.BODY_TIMEOUT_ENV}); nothing was kept, send it again",
                               field="file") from None
            size += len(chunk)
            if size > limit:
                raise ApiError(413, "too_large", dataset_files.too_large_message(limit), field="file")
            out.write(chunk)
    return size


@router.post("/upload", response_model=DataFile, status_code=201, responses=error_responses(403, 408, 413, 422))
async def upload(request: Request,
                 name: Annotated[str, Query(max_length=120, description="The file's name, e.g. my-data.jsonl (.jsonl, .json, .csv or .parquet).")]) -> DataFile:
    """Upload a data file (the request body is the file) into <home>/datasets. A taken
    name gets a -2, -3, ... suffix; nothing is ever replaced."""
    name = _checked_name(name)
    folder = paths.datasets_root()
    folder.mkdir(parents=True, exist_ok=True)
    handle, part_name = tempfile.mkstemp(prefix=".upload-", suffix=Path(name).suffix.lower(), dir=folder)
    os.close(handle)
    part = Path(part_name)
    try:
        size = await _receive_into(request, part, dataset_files.upload_max_bytes())
        if size == 0:
            raise ApiError(422, "invalid_input", "file: the request body is empty; send the file's bytes as the body", field="file")
        try:
            found = await asyncio.to_thread(dataset_files.look, part)
        except NotData as exc:
            raise ApiError(422, "not_data", f"file: {paths.shown(name)} cannot be read as data: {exc}", field="file") from None
        final = await asyncio.to_thread(dataset_files.claim, part, folder, name)
    except BaseException:
        part.unlink(missing_ok=True)  # refused, failed or cut off: nothing of it stays
        raise
    return DataFile(path=str(final), name=final.name, root=str(folder), size_bytes=size, rows=found.rows, columns=found.columns)
