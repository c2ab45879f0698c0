"""Which weights a chat or a served model means: `resolve_target` turns a stored run (and
an optional checkpoint step) into a `ModelTarget`, or refuses with a message that names
the fix. Also the model ids the OpenAI endpoints use (`run-12`, `run-12-base`,
`run-12-checkpoint-40`). Torch-free: the CLI and the server call it directly.

A completed run is served from its folder (the adapter, or the full model, with its
tokenizer); a stopped run from the checkpoint its stop saved; any run that was not
cancelled from a named valid checkpoint (`checkpoint-N`, checked by `checkpoints.py`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from tunelab import families
from tunelab.checkpoints import CHECKPOINT_NAME, WEIGHT_FILES, InvalidCheckpoint, latest_valid_checkpoint, validate_checkpoint

MODEL_ID = re.compile(r"run-(\d{1,18})(?:-checkpoint-(\d{1,18}))?(-base)?")


class InferenceError(Exception):
    """Base of every refusal to load or generate; `field` names the option at fault, if any."""

    field: str | None = None


class TargetNotFound(InferenceError):
    """No such run (CLI exit 1, HTTP 404)."""


class TargetRefused(InferenceError):
    """The run has no weights to talk to in its current state (CLI exit 1, HTTP 409)."""


class TargetInputError(InferenceError):
    """An option that cannot be honoured for this run (CLI exit 2, HTTP 400)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class ModelTarget:
    run_id: int
    step: int | None           # the checkpoint's step, or None for a completed run's final weights
    kind: str                  # adapter | full
    weights: Path              # the folder holding the weights and the tokenizer
    base_model: str            # the run's model_name: what an adapter applies to, what "base" means
    trust_remote_code: bool
    approved_remote_code_fingerprint: str | None = None  # checked again by the child before it loads any of the code
    modality: str = "text"     # what the run trained (events.MODALITIES): which inputs its answers may take
    image_size: int = 512      # a vision run's vision_image_size: images are shrunk to it, as in training

    @property
    def key(self) -> tuple[int, str]:
        return self.run_id, str(self.weights)

    @property
    def label(self) -> str:
        return f"run {self.run_id}" + (f", checkpoint {self.step}" if self.step is not None else "")

    def model_id(self, base: bool = False) -> str:
        return model_id(self.run_id, self.step, base)

    def child_request(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "kind": self.kind, "weights": str(self.weights), "base_model": self.base_model,
                "trust_remote_code": self.trust_remote_code,
                "approved_remote_code_fingerprint": self.approved_remote_code_fingerprint,
                "modality": self.modality, "image_size": self.image_size}


def model_id(run_id: int, step: int | None = None, base: bool = False) -> str:
    return f"run-{run_id}" + (f"-checkpoint-{step}" if step is not None else "") + ("-base" if base else "")


def parse_model_id(text: str) -> tuple[int, int | None, bool] | None:
    """(run id, checkpoint step or None, base?) of a model id, or None when it is not one."""
    match = MODEL_ID.fullmatch(text.strip())
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)) if match.group(2) else None, bool(match.group(3))


def valid_checkpoint_steps(output_dir: str | Path | None) -> list[int]:
    """The steps of the valid `checkpoint-N` folders in a run folder, ascending."""
    steps = []
    for step, folder in _checkpoint_folders(output_dir):
        try:
            validate_checkpoint(folder)
        except InvalidCheckpoint:
            continue
        steps.append(step)
    return sorted(steps)


def _checkpoint_folders(output_dir: str | Path | None) -> Iterable[tuple[int, Path]]:
    if not output_dir:
        return []
    try:
        return [(int(m.group(1)), entry) for entry in Path(output_dir).iterdir()
                if (m := CHECKPOINT_NAME.fullmatch(entry.name)) and entry.is_dir() and not entry.is_symlink()]
    except (OSError, ValueError):
        return []


def _checkpoint_hint(run_id: int, output_dir: str | None) -> str:
    steps = valid_checkpoint_steps(output_dir)
    if not steps:
        return f"run {run_id} has no valid checkpoint either"
    return f"valid checkpoints of run {run_id}: {', '.join(map(str, steps))} (--checkpoint N, or model run-{run_id}-checkpoint-N)"


def resolve_target(run: dict[str, Any] | None, run_id: int, step: int | None = None, speech: bool = False,
                   evaluate: bool = False) -> ModelTarget:
    """The weights to load for `run` (the store's record), at checkpoint `step` if given;
    `speech`: for speaking (a text-to-speech run), not chat; `evaluate`: for an evaluation,
    which also measures a speech-to-text run."""
    if run is None:
        raise TargetNotFound(f"there is no run {run_id}; list runs with `tunelab runs`")
    status, output_dir = run["status"], run.get("output_dir")
    _check_modality(run_id, run.get("modality"), speech, evaluate)
    if status == "running":
        raise TargetRefused(f"run {run_id} is still training; chat with it once it has finished or been stopped with save")
    if status == "stopped" and (run.get("cancel_requested") or not output_dir):
        raise TargetRefused(f"run {run_id} was cancelled, so none of its weights were kept")
    if step is not None:
        folder = Path(output_dir or "") / f"checkpoint-{step}"
        try:
            validate_checkpoint(folder)
        except InvalidCheckpoint as exc:
            raise TargetInputError("checkpoint", f"checkpoint {step} of run {run_id} cannot be used ({exc.reason}); "
                                                 f"{_checkpoint_hint(run_id, output_dir)}") from None
    elif status == "completed":
        folder = Path(output_dir or "")
        if not output_dir or not folder.is_dir():
            raise TargetRefused(f"run {run_id}'s output folder {output_dir or '(none)'} no longer exists")
    elif status == "stopped":
        found = latest_valid_checkpoint(output_dir, at_most=run.get("final_step"))
        if found is None:
            raise TargetRefused(f"run {run_id} was stopped but {output_dir} holds no valid checkpoint of it")
        folder, step = found, int(CHECKPOINT_NAME.fullmatch(found.name).group(1))
    else:
        detail = f" ({run['error_message']})" if run.get("error_message") else ""
        raise TargetRefused(f"run {run_id} ended in error{detail}, so it has no final weights; "
                            f"{_checkpoint_hint(run_id, output_dir)}")
    config = run.get("config") or {}
    return ModelTarget(run_id=run_id, step=step, kind=_kind_of(run_id, folder), weights=folder,
                       base_model=str(config.get("model_name") or run.get("model_name") or ""),
                       trust_remote_code=bool(config.get("trust_remote_code")),
                       approved_remote_code_fingerprint=config.get("approved_remote_code_fingerprint"),
                       modality=run.get("modality") or "text", image_size=int(config.get("vision_image_size") or 512))


def trained(modality: str | None) -> str:
    """What a run of `modality` trained, for a refusal: its family spec's words."""
    spec = families.by_modality(modality or families.DEFAULT.modality)
    return spec.words if spec is not None else f"a {modality} model"


def _check_modality(run_id: int, modality: str | None, speech: bool = False, evaluate: bool = False) -> None:
    """Chat is for the models that answer in text (text, vision-language with images,
    audio chat with clips), speaking for text-to-speech ones, evaluation for those and
    speech-to-text; a run's modality is what its worker reported it trained, and its family
    spec says how it is served."""
    spec = families.by_modality(modality or families.DEFAULT.modality)
    if speech:
        if spec is None or spec.serves != "speak":
            raise TargetRefused(f"run {run_id} trained {trained(modality)}, not a text-to-speech one, so it cannot speak; "
                                + ("chat with it instead (`tunelab chat`)" if spec is families.DEFAULT else
                                   "speaking needs a run of a text-to-speech model (modality tts)"))
        return
    if spec is not None and spec.chat_refusal and not (evaluate and spec.evaluates):
        raise TargetRefused(spec.chat_refusal.format(run_id=run_id))


def _kind_of(run_id: int, folder: Path) -> str:
    for name, kind in WEIGHT_FILES:
        if (folder / name).is_file() and not (folder / name).is_symlink():
            if kind == "mlx":
                raise TargetRefused(f"run {run_id} trained with the mlx backend; chat with it through mlx-lm "
                                    f"(`mlx_lm.chat --model <base> --adapter-path {folder}`), tunelab chats with torch runs")
            return kind
    raise TargetRefused(f"{folder} holds no weights file (looked for {', '.join(n for n, _ in WEIGHT_FILES)})")


def servable_targets(runs: Iterable[dict[str, Any]]) -> list[tuple[ModelTarget, dict[str, Any]]]:
    """(target, run) for each of `runs` that can be talked to as it is (no checkpoint named)."""
    found = []
    for run in runs:
        try:
            found.append((resolve_target(run, run["id"]), run))
        except InferenceError:
            continue
    return found
