"""The typed shapes of the HTTP API: what each route takes and answers.

They exist for the client: FastAPI checks requests against them and `/docs` shows them.
A training run's settings are `RunConfig` itself (tunelab.config.run_config), so the API and
config files can never drift apart. A job id is a run id: a started job is a run row.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from tunelab.config.run_config import DataFormat, DisplayName, Name, RunConfig, S3Source, TrainingType
from tunelab.events import MODALITIES

MODALITY_HELP = (f"What the run trains on: {', '.join(MODALITIES)}; null until its worker has prepared the data "
                 "(a vision model given text-only data trains as text).")


# --- errors ---------------------------------------------------------------------------
class FieldMessage(BaseModel):
    field: str
    message: str


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable word, e.g. run_active, invalid_input.")
    message: str = Field(description="What went wrong and how to fix it.")
    field: str | None = Field(None, description="The input at fault, when one is.")
    fields: list[FieldMessage] | None = Field(None, description="Every bad field (validation errors).")


class ErrorBody(BaseModel):
    error: ErrorDetail


ERROR_BODY_REF = "#/components/schemas/ErrorBody"


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries saying that these statuses answer with the error shape.

    A reference to the schema rather than FastAPI's `"model": ErrorBody`: for a model FastAPI
    builds a validator per route and status (over 200), used only to write the OpenAPI
    document, and that was a third of the server's start-up. `error_schemas` puts the
    shape itself into the document; it reads the same either way."""
    return {status: {"content": {"application/json": {"schema": {"$ref": ERROR_BODY_REF}}}} for status in statuses}


def error_schemas() -> dict[str, Any]:
    """The component schemas `error_responses` refers to (ErrorBody and the models in it),
    written by FastAPI itself for one route that names the model."""
    from fastapi.openapi.utils import get_openapi
    from fastapi.routing import APIRoute

    def shape() -> None:
        """Never served: it only carries the error model."""

    route = APIRoute("/error", shape, responses={400: {"model": ErrorBody}})
    return get_openapi(title="errors", version="0", routes=[route])["components"]["schemas"]


# --- training -------------------------------------------------------------------------
class StartRequest(RunConfig):
    """A run's settings plus an optional idempotency key."""

    start_request_id: Name | None = Field(
        None, min_length=1, max_length=200,
        description="Client-chosen id; sending the same id again never starts a second run and returns the first job.",
    )


class CheckAnswer(BaseModel):
    ok: bool = Field(True, description="Always true: a config that fails its checks is a 422 listing every problem.")
    config: dict[str, Any] = Field(description="The config as a start would store it: every setting, defaults filled in, "
                                               "paths resolved, secrets left out.")


class JobAnswer(BaseModel):
    job_id: int = Field(description="The run id of the job.")
    status: str = Field(description="The run's status: queued, running, completed, stopped, error or cancelled.")
    duplicate: bool = Field(False, description="True when this start_request_id had already started the job.")
    queued: bool = Field(False, description="True when the run waits in the queue for its devices (config queue: true).")
    queue_position: int | None = Field(None, description="Its place in the queue (1 = next to start) while queued.")

    @classmethod
    def of(cls, orchestrator: Any, run_id: int, status: str | None = None, duplicate: bool = False) -> "JobAnswer":
        """The answer for a run just started (or found again): running, or queued at its position."""
        position = orchestrator.queue_position(run_id)
        status = "queued" if position is not None else (status if status and status != "queued" else "running")
        return cls(job_id=run_id, status=status, duplicate=duplicate, queued=position is not None,
                   queue_position=position)


class RunStopAnswer(BaseModel):
    job_id: int
    save: bool
    outcome: str = Field(description="stopping (the worker stops at its next step) or cancelled (it was queued).")
    phase: str


class ResumeS3Keys(BaseModel):
    model_config = ConfigDict(extra="forbid")
    access_key_id: SecretStr | None = None
    secret_access_key: SecretStr | None = None
    session_token: SecretStr | None = None


class ResumeRequest(BaseModel):
    """The secrets a resumed run needs again (the history never stores them). Each may
    instead be set in the server's environment (HF_TOKEN, WANDB_API_KEY, AWS_*)."""

    model_config = ConfigDict(extra="forbid")
    hf_token: SecretStr | None = Field(None, description="Hub token, when the run used one (secret; never stored).")
    wandb_token: SecretStr | None = Field(None, description="W&B key, when the run used one (secret; never stored).")
    s3: ResumeS3Keys | None = Field(None, description="S3 keys, when the run's data came from S3 with keys.")

    def secrets(self) -> dict[str, Any]:
        """Plain values for `Orchestrator.resume`."""
        plain = {k: v.get_secret_value() for k in ("hf_token", "wandb_token") if (v := getattr(self, k))}
        if self.s3:
            plain["s3"] = {k: v.get_secret_value() for k, v in self.s3 if v is not None}
        return plain


class StopRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    save: bool = Field(description="true: stop at the next step and save a resumable checkpoint; false: cancel, removing the run's folder when it is inside the outputs root and no other run uses it (the run's error_message says what became of it).")
    expected_job_id: int | None = Field(None, description="Refuse (409) unless this is still the run that trains here "
                                                          "(the one /api/train/status shows).")


class StopAnswer(BaseModel):
    job_id: int | None
    run_id: int | None = Field(None, description="The run the stop was sent to; same as job_id.")
    save: bool
    phase: str


class ExtraSeries(BaseModel):
    """One extra metric: the steps that logged it and its values there (paired arrays)."""

    steps: list[int] = []
    values: list[float] = []


EXTRA_HELP = ("Numbers the training method logs beyond the fixed ones (e.g. mean_token_accuracy, entropy, "
              "eval_mean_token_accuracy), by name; each series has only the steps that logged it.")


class Histories(BaseModel):
    """Chart series as paired arrays: loss and learning_rate share `steps`."""

    steps: list[int] = []
    loss: list[float | None] = []
    learning_rate: list[float | None] = []
    grad_norm_steps: list[int] = []
    grad_norm: list[float | None] = []
    eval_steps: list[int] = []
    eval_loss: list[float | None] = []
    extra: dict[str, ExtraSeries] = Field({}, description=EXTRA_HELP)


class TrainStatus(BaseModel):
    model_config = ConfigDict(extra="allow")
    phase: str = Field(description="idle, queued, loading_model, loading_dataset, configuring, training, finalizing, completed, stopped, error or cancelled (withdrawn while queued).")
    is_training_running: bool
    job_id: int | None = Field(None, description="The run that trains here now (or the last one that did; never a "
                                                 "queued run); same as run_id.")
    run_id: int | None = None
    step: int | None = None
    total_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    eval_loss: float | None = None
    num_tokens: int | None = None
    elapsed_seconds: float | None = None
    eta_seconds: float | None = None
    peak_memory_gb: float | None = Field(None, description="Peak memory of the run: CUDA memory allocated, or the worker's resident memory on CPU; the largest over ranks in a distributed run.")
    peak_memory_reserved_gb: float | None = Field(None, description="Peak CUDA memory the allocator reserved (None on CPU).")
    extra: dict[str, float] = Field({}, description="The latest value of each extra metric the run has logged.")
    world_size: int | None = Field(None, description="Training processes the run spans, all nodes together (1 for a one-process run).")
    modality: str | None = Field(None, description=MODALITY_HELP)
    message: str | None = None
    error: str | None = None
    output_dir: str | None = None
    queue_position: int | None = Field(None, description="While the run waits in the queue: its place (1 = next to start).")
    devices: list[str] | None = Field(None, description="The devices the run was given (gpu-<n>, or cpu), once placed.")
    histories: Histories = Histories()


class MetricsAnswer(BaseModel):
    job_id: int | None
    run_id: int | None = Field(None, description="The run these are the histories of; same as job_id.")
    histories: Histories


# --- history --------------------------------------------------------------------------
class RunSummary(BaseModel):
    id: int
    status: str
    display_name: str | None
    model_name: str
    dataset_name: str
    modality: str | None = Field(None, description=MODALITY_HELP)
    started_at: float = Field(description="Unix seconds.")
    ended_at: float | None
    total_steps: int | None
    final_step: int | None
    final_loss: float | None
    duration_seconds: float | None
    output_dir: str | None
    error_message: str | None
    loss_sparkline: list[float] = Field(description="Up to 50 losses spread over the run.")
    cancel_requested: bool
    resume_blocked: bool
    resumed_from_run_id: int | None
    resumed_by_run_id: int | None
    can_resume: bool = Field(description="True when POST /api/runs/{id}/resume would be accepted now.")
    owner: str | None = Field(None, description="The API key that started the run (a resume keeps its run's owner); "
                                                "null: the server's own token or the CLI.")


class RunList(BaseModel):
    runs: list[RunSummary]
    total: int
    limit: int
    offset: int


class RunMetrics(BaseModel):
    """Every stored metric row as paired arrays (one entry per step; null where unknown)."""

    steps: list[int]
    loss: list[float | None]
    learning_rate: list[float | None]
    grad_norm: list[float | None]
    eval_loss: list[float | None]
    epoch: list[float | None]
    num_tokens: list[int | None]
    elapsed_seconds: list[float | None]
    extra: dict[str, ExtraSeries] = Field({}, description=EXTRA_HELP)


class EarlierRun(BaseModel):
    """A run that a resumed run continues: its steps up to the one the next run resumed from."""

    run_id: int
    display_name: str | None
    status: str
    until_step: int | None = Field(description="The step the run after it resumed from (its checkpoint); its later "
                                               "steps are not part of this curve. Null when unknown: all its steps count.")
    metrics: RunMetrics


class RunDetail(RunSummary):
    config: dict[str, Any] = Field(description="The run's settings, without secrets.")
    metrics: RunMetrics = Field(description="This run's own steps (a resumed run's start after the step it resumed from).")
    earlier_runs: list[EarlierRun] = Field([], description=(
        "For a resumed run, the runs it continues, oldest first, each with its steps up to the resume point: with "
        "`metrics` they make the whole curve. The list stops at a run the caller may not read."))


class RenameRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    display_name: DisplayName = Field(min_length=1)


class DeleteAnswer(BaseModel):
    deleted: int
    artifacts_removed: bool
    exports_removed: list[str] = Field(default_factory=list, description=(
        "With delete_artifacts: the export folders outside the run's folder that were the run's own and went with it."))


# --- datasets -------------------------------------------------------------------------
class DatasetPreviewRequest(BaseModel):
    """Where the data is and how to read it: the data fields of RunConfig, plus how many
    rows to show. `model_name` (optional) renders rows with that model's chat template.
    Other run settings are ignored, so a client may send its whole run config."""

    model_config = ConfigDict(extra="ignore")
    model_name: str | None = None
    training_type: TrainingType = Field("lora", description="continued_pretraining shows rows as raw text.")
    dataset: str | None = None
    local_datasets: list[str] = []
    s3: S3Source | None = None
    subset: str | None = None
    train_split: str = "train"
    slice_start: int | None = Field(None, ge=0)
    slice_end: int | None = Field(None, ge=1)
    format: DataFormat = "auto"
    column_mapping: dict[str, str] = {}
    role_mapping: dict[str, str] = {}
    rows: int = Field(3, ge=1, le=20, description="How many rows to render.")


class PreviewImage(BaseModel):
    name: str = Field(description="The image's path as the data gives it (or '(embedded image)').")
    width: int | None = None
    height: int | None = None
    thumbnail: str | None = Field(None, description="A small JPEG as a data: URL.")
    error: str | None = Field(None, description="Why the image cannot be read (then no size or thumbnail).")


class PreviewRow(BaseModel):
    index: int
    text: str = Field(description="The row as the model will read it.")
    messages: list[dict[str, str]] | None = Field(None, description="The row's chat turns (chat formats only).")
    images: list[PreviewImage] | None = Field(None, description="The row's images (image-text data only).")


class RemoteCodeFile(BaseModel):
    name: str = Field(description="The file, relative to the model (another repository's as 'repo--file.py').")
    sha256: str


class RemoteCodeInfo(BaseModel):
    """The model's own code files (what trust_remote_code would run), read without running them."""

    fingerprint: str | None = Field(description="The approved_remote_code_fingerprint that approves exactly these files; "
                                                "null when the model names no code of its own or its files cannot be read here.")
    files: list[RemoteCodeFile]
    note: str = ""


class DatasetPreview(BaseModel):
    format: str = Field(description="alpaca, sharegpt, chatml, text, caption or transcription.")
    columns: list[str]
    row_count: int | None = Field(description="Rows in the training split (null when unknown, e.g. streaming).")
    rendered_with: Literal["chat_template", "plain", "raw_text"] = Field(
        description="chat_template: through model_name's chat template; plain: chat turns without a model; raw_text: text trained as is.")
    note: str | None = Field(None, description="Why the rows are not shown through the model's template, when they are not.")
    rows: list[PreviewRow]
    image_count: int | None = Field(None, description="Images in the whole training split (image-text data only).")
    bad_image_rows: int | None = Field(None, description="Rows with an image training would not take: missing, unreadable, not an image or outside the readable folders (image-text data only; skip_bad_images skips them in a run, except those outside the readable folders).")
    image_rows_checked: int | None = Field(None, description="How many rows (from the first) bad_image_rows covers.")
    bad_audio_rows: int | None = Field(None, description="Rows with a clip training would not take: missing, unreadable, empty, outside the readable folders, or (with a model given) longer than its feature extractor's window (audio + transcript data only; skip_bad_audio skips them in a run, except those outside the readable folders).")
    audio_rows_checked: int | None = Field(None, description="How many rows (from the first) bad_audio_rows covers.")
    remote_code: RemoteCodeInfo | None = Field(None, description="model_name's own code files and their fingerprint (when model_name is given).")


# --- health ---------------------------------------------------------------------------
class Health(BaseModel):
    status: Literal["ok", "shutting_down"] = Field(description="shutting_down (with HTTP 503) once a shutdown signal arrived")
    version: str
    pid: int | None = Field(None, description="Only with ?detail=1 (needs the token).")
    rss_mb: float | None = None
    heavy_modules: list[str] | None = Field(None, description="Training libraries loaded in the server process; always empty.")
    phase: str | None = None
