"""`/api/runs/{id}/samples`: the spoken samples a text-to-speech run writes at each eval.

A TTS run's worker writes `samples/step-<N>.wav` in its output folder
(`worker.tts_sample`); these routes list them and serve one, behind the same token as
the rest of the API (the page fetches it with its header and plays it; ranges are
answered, as FileResponse does), or all of them as one zip. Only names of
that exact shape are served, and only from that folder with every symlink resolved, so
no request reaches any other file.
"""

from __future__ import annotations

import re
from pathlib import Path as FilePath
from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, Field

from tunelab import paths
from tunelab.server.errors import ApiError
from tunelab.server.routes_downloads import zip_response, zip_stream
from tunelab.server.routes_runs import _require_run
from tunelab.server.run_ids import RunId
from tunelab.server.schemas import error_responses

router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401))
SAMPLES_FOLDER = "samples"  # worker.tts_sample.SAMPLES_FOLDER (the server does not import the worker)
SAMPLE_NAME = re.compile(r"^step-(\d{1,12})\.wav$")


class Sample(BaseModel):
    name: str = Field(description="The file's name, step-<N>.wav.")
    step: int = Field(description="The training step whose eval spoke it.")
    size_bytes: int


class SampleList(BaseModel):
    samples: list[Sample] = Field(description="Oldest step first; empty for a run that speaks none (any but text-to-speech).")


def _folder(request: Request, run_id: int) -> FilePath | None:
    output_dir = _require_run(request, run_id).get("output_dir")
    folder = FilePath(output_dir) / SAMPLES_FOLDER if output_dir else None
    return folder if folder is not None and paths.is_dir(folder) and paths.is_within(folder, output_dir) else None


@router.get("/{run_id}/samples", response_model=SampleList, responses=error_responses(404, 422))
def list_samples(request: Request, run_id: RunId) -> SampleList:
    """The run's spoken samples (a text-to-speech run writes one at each eval)."""
    folder = _folder(request, run_id)
    found = []
    for file in sorted(folder.iterdir()) if folder else []:
        match = SAMPLE_NAME.match(file.name)
        if match and file.is_file() and paths.is_within(file, folder):
            found.append(Sample(name=file.name, step=int(match.group(1)), size_bytes=file.stat().st_size))
    return SampleList(samples=sorted(found, key=lambda s: s.step))


@router.get("/{run_id}/samples.zip", response_class=StreamingResponse, responses={**error_responses(404, 422), 200: {"content": {"application/zip": {}}}})
def download_samples(request: Request, run_id: RunId) -> StreamingResponse:
    """All of the run's spoken samples as one zip (each one alone, with ranges, at
    GET /api/runs/{run_id}/samples/{name})."""
    names = [sample.name for sample in list_samples(request, run_id).samples]
    if not names:
        raise ApiError(404, "sample_not_found", f"run {run_id} has no spoken samples (only a text-to-speech run with evals has)")
    return zip_response(zip_stream(_folder(request, run_id), names), f"run-{run_id}-samples.zip")


@router.get("/{run_id}/samples/{name}", response_class=FileResponse, responses={**error_responses(404, 422), 200: {"content": {"audio/wav": {}}}})
def get_sample(request: Request, run_id: RunId,
               name: Annotated[str, Path(max_length=40, description="A sample's name from the list, e.g. step-20.wav.")]) -> FileResponse:
    """One spoken sample, as audio/wav."""
    if not SAMPLE_NAME.match(name):
        raise ApiError(404, "sample_not_found", f"'{paths.shown(name)}' is not a sample name; names look like step-20.wav (GET /api/runs/{run_id}/samples lists them)")
    folder = _folder(request, run_id)
    file = folder / name if folder else None
    if file is None or not file.is_file() or not paths.is_within(file, folder):
        raise ApiError(404, "sample_not_found", f"run {run_id} has no sample {name}; GET /api/runs/{run_id}/samples lists the ones it has")
    return FileResponse(file, media_type="audio/wav", filename=name)
