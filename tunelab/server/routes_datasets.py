"""`/api/datasets/preview`: what the model would read from a dataset, before training.

The settings are validated and every path checked here, in the server; the reading and
rendering happen in a short-lived child process (`preview_child`) so the server never
loads `datasets` or `transformers`; a spare child with its imports done takes the request
when the server keeps one (`preview_spare`). The child is killed when it runs past its time. Its
`datasets` caches go to a folder of its own under the home's `previews/`, removed when
the preview ends, however it ends; a folder left there by a server that died mid-preview
is swept once it is a day old.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from tunelab import paths
from tunelab.config.run_config import RunConfig, parse_config
from tunelab.remote_code.check import code_summary
from tunelab.server.errors import ApiError
from tunelab.server.preview_spare import PreviewSpare
from tunelab.server.schemas import DatasetPreview, DatasetPreviewRequest, error_responses
from tunelab.server.user_paths import checked_config

log = logging.getLogger("tunelab.server")
router = APIRouter(prefix="/api/datasets", tags=["datasets"], responses=error_responses(401))

PREVIEW_TIMEOUT_ENV = "TUNELAB_PREVIEW_TIMEOUT_S"
DEFAULT_PREVIEW_TIMEOUT_S = 90.0
# The child caps what it shows (worker/preview/limits.py: TOTAL_CHARS); this bounds what is read even
# if it did not. JSON escaping can make each character up to 6 bytes (\uXXXX).
MAX_ANSWER_BYTES = 2 << 20
STDERR_TAIL_BYTES = 4000
# Stand-in model for validating data settings when no model was named; never loaded.
NO_MODEL = "preview-without-model"
# Far beyond any preview's timeout, so a folder this old belongs to no live preview.
STALE_PREVIEW_S = 24 * 3600


def preview_config(body: DatasetPreviewRequest) -> RunConfig:
    """The request as a RunConfig, so data settings are judged by the same rules as a run."""
    data = body.model_dump(exclude={"rows"}, exclude_unset=True)
    data["model_name"] = body.model_name or NO_MODEL
    return parse_config(data)


def _timeout() -> float:
    try:
        return float(os.environ.get(PREVIEW_TIMEOUT_ENV, DEFAULT_PREVIEW_TIMEOUT_S))
    except ValueError:
        return DEFAULT_PREVIEW_TIMEOUT_S


def _sweep_stale(previews: Path) -> None:
    cutoff = time.time() - STALE_PREVIEW_S
    for folder in previews.iterdir():
        if folder.is_dir() and not folder.is_symlink() and folder.stat().st_mtime < cutoff:
            shutil.rmtree(folder, ignore_errors=True)


async def run_preview_child(request: dict[str, Any], timeout: float,
                            argv: tuple[str, ...] = ("-m", "tunelab.worker.preview.child"),
                            spare: PreviewSpare | None = None) -> dict[str, Any]:
    """Run the preview child (`spare`'s waiting one if it has one, else `python <argv>`)
    on `request` and return its JSON answer. Its stdout is read only up to
    MAX_ANSWER_BYTES and its stderr only as a tail, so a child that answers too much
    cannot grow this server's memory."""
    process = await spare.take() if spare is not None else None
    if process is None:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *argv,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
    try:
        out, err = await asyncio.wait_for(_talk(process, json.dumps(request).encode()), timeout)
    except TimeoutError:
        raise ApiError(504, "preview_timeout", f"reading the dataset took longer than {timeout:.0f} s; "
                       f"try a smaller slice (slice_end) or raise {PREVIEW_TIMEOUT_ENV}") from None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if out is None:
        log.error("dataset preview child answered more than %d bytes; its answer was dropped", MAX_ANSWER_BYTES)
        raise ApiError(502, "preview_too_large", "the dataset preview came back larger than the server accepts; "
                       "preview fewer rows (rows) or a smaller slice") from None
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        log.error("dataset preview child failed (exit %s):\n%s", process.returncode, err.decode(errors="replace"))
        raise ApiError(502, "preview_failed", "the dataset could not be previewed; details are in the server log") from None


async def _talk(process: asyncio.subprocess.Process, request: bytes) -> tuple[bytes | None, bytes]:
    """Send the request, then read stdout (None once it passes MAX_ANSWER_BYTES) and the
    last STDERR_TAIL_BYTES of stderr, both at once so neither pipe can fill and block."""
    try:
        process.stdin.write(request)
        await process.stdin.drain()
        process.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child ended without reading; its exit and stderr say why

    async def answer() -> bytes | None:
        chunks, size = [], 0
        while chunk := await process.stdout.read(1 << 16):
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                process.kill()
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def stderr_tail() -> bytes:
        tail = b""
        while chunk := await process.stderr.read(1 << 16):
            tail = (tail + chunk)[-STDERR_TAIL_BYTES:]
        return tail

    out, err = await asyncio.gather(answer(), stderr_tail())
    await process.wait()
    return out, err


@router.post("/preview", response_model=DatasetPreview, responses=error_responses(422, 502, 504))
async def preview(body: DatasetPreviewRequest, request: Request) -> DatasetPreview:
    """Detect the format, list the columns, count the rows and render the first rows
    exactly as training will (chat data through the model's chat template when
    `model_name` is given). Other run settings in the body are ignored."""
    config = checked_config(preview_config(body), request.app.state)
    tokenizer = config.model_name if body.model_name else None
    child_request = {"config": config.worker_payload(), "rows": body.rows, "tokenizer": tokenizer}
    async with request.app.state.preview_slots:
        await asyncio.to_thread(_sweep_stale, paths.previews_dir())
        cache_dir = tempfile.mkdtemp(prefix="preview-", dir=paths.previews_dir())
        spare = request.app.state.preview_spare
        try:
            answer = await run_preview_child({**child_request, "cache_dir": cache_dir}, _timeout(), spare=spare)
        finally:
            # The child has exited (or was killed) by now, so nothing writes here any more.
            await asyncio.to_thread(shutil.rmtree, cache_dir, True)
            await spare.refill()  # after the preview, not during it: they would share the CPU
    if not answer.get("ok"):
        error = answer.get("error") or {}
        raise ApiError(422, error.get("code", "bad_dataset"), error.get("message", "the dataset cannot be read"), error.get("field"))
    remote_code = await asyncio.to_thread(code_summary, tokenizer, config.trust_remote_code) if tokenizer else None
    return DatasetPreview(**answer["preview"], remote_code=remote_code)
