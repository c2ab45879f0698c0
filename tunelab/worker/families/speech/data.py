"""Audio + transcript data for a speech-to-text model: rows in, clip references and label ids out.

`prepare(config, processor, raw, model_config)` turns each `transcription` row into
  audio   `{path, bytes}`: a file path (relative ones resolved against the dataset file's
          folder, as `vision_data` does for images) or the bytes of an embedded clip
  labels  the transcript's token ids as the tokenizer writes them for this model —
          Whisper's prefix tokens (<|startoftranscript|><|lang|><|transcribe|><|notimestamps|>),
          the words, then <|endoftext|>
Every clip is decoded once here (one at a time) to check it before training: a missing
file, one libsndfile cannot decode, an empty clip, or one longer than the feature
extractor takes (30 s for Whisper) is an error naming the row, the path and the field.
With `skip_bad_audio` such a row is dropped instead, and the count with the first few
rows, paths and reasons comes back as a note the worker reports (as `skip_bad_images`
does for images). Samples are kept nowhere: `speech_collator` decodes again, batch by
batch. In a run a server started (`paths.reads_confined`) a clip outside the data roots
is refused, skip or not.
Torch-free apart from the collator it hands on.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tunelab import paths
from tunelab.worker.data.prepare import PreparedData, _check_batch_fits
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.data.sources import RawData
from tunelab.worker.families.speech.clips import longest_seconds, open_clip
from tunelab.worker.families.speech.formats import TRANSCRIPTION, WORKING_EXAMPLE, audio_column, transcript_column
from tunelab.worker.families.vision.data import _source_field, data_folders, drop_bad_rows, image_reference

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

SPEECH_COLUMNS = ("audio", "labels")


class BadClip(ValueError):
    """A clip that cannot train: the message says what is wrong with it, `kind` in a word
    (missing, unreadable, empty, too long)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


EXTRACTOR_LIMIT = "the model's feature extractor takes"


def check_clip(ref: dict[str, Any], longest: float | None, limit: str = EXTRACTOR_LIMIT) -> float:
    """Decode the whole clip (so a file with a good header and broken data is found now);
    returns its length in seconds. `limit` says what sets `longest`."""
    from pathlib import Path

    if not ref.get("bytes") and not Path(ref["path"]).is_file():
        raise BadClip("does not exist; correct the path (relative paths are relative to the dataset file) or remove the row", "missing")
    with open_clip(ref) as clip:
        seconds = clip.frames / clip.samplerate
        if longest is not None and seconds > longest + 1e-6:
            raise BadClip(f"is {seconds:.1f} s long and {limit} at most {longest:g} s; "
                          "cut the clip into shorter pieces or remove the row", f"longer than {longest:g} s")
        frames = len(clip.read(dtype="float32"))
    if frames == 0:
        raise BadClip("is empty (no audio samples); remove the row", "empty")
    return frames / clip.samplerate


@dataclass(frozen=True)
class ClipPlace:
    """Where a split's clips are read from and how an error names them."""
    folders: list[Any]  # relative paths resolve against these
    field: str  # the setting that names the data
    what: str  # "training" or "eval"
    column: str  # the audio column
    confined: bool  # a server-started run reads only inside the data roots


def clip_place(config: WorkerConfig, what: str, column: str) -> ClipPlace:
    return ClipPlace(data_folders(config, what), _source_field(config, what), what, column, paths.reads_confined())


class BadAudioRow(DataFormatError):
    """A row whose clip cannot train (as opposed to a path refusal, which no setting skips):
    `shown` names its path and `kind` says what is wrong in a word."""

    def __init__(self, field: str, message: str, shown: str, kind: str):
        super().__init__(field, message)
        self.shown, self.kind = shown, kind


def checked_clip(raw_ref: Any, index: int, place: ClipPlace, longest: float | None, hint: str = "",
                 limit: str = EXTRACTOR_LIMIT) -> dict[str, Any]:
    """Row `index`'s clip as `{path, bytes}`, decoded once to check it; any problem is a
    DataFormatError naming the row, the path and the field (speech-to-text and text-to-speech rows
    alike) — a BadAudioRow when the clip itself is bad. `hint` ends the message (", or set ..."),
    `limit` says what sets `longest` ("the model's feature extractor takes")."""
    ref = None
    where = f"row {index} of the {place.what} data: audio"
    try:
        ref = image_reference(raw_ref, place.folders)
        if place.confined and not ref["bytes"]:
            paths.check_readable(ref["path"], place.field)
        check_clip(ref, longest, limit)
    except paths.PathNotAllowed as exc:
        raise DataFormatError(place.field, f"{where} {exc}") from exc
    except BadClip as exc:
        raise BadAudioRow(place.field, f"{where} {_shown(ref, raw_ref)} (column '{place.column}') {exc}{hint}",
                          _shown(ref, raw_ref), exc.kind) from exc
    except Exception as exc:  # not audio, truncated data, bad reference
        raise BadAudioRow(place.field, f"{where} {_shown(ref, raw_ref)} (column '{place.column}') cannot be read "
                                       f"({exc}); fix or remove the row, or correct the path (relative paths are relative to the dataset file)"
                                       f"{hint}", _shown(ref, raw_ref), "unreadable") from exc
    return ref


def _row_features() -> Any:
    """The converted rows' columns, stated rather than inferred: a first batch of skipped
    rows must not fix the column types for the good rows after it."""
    import datasets

    return datasets.Features({
        "audio": {"path": datasets.Value("string"), "bytes": datasets.Value("binary")},
        "labels": datasets.List(datasets.Value("int64")),
        "bad_audio": datasets.Value("string"),
    })


SKIP_HINT = ", or set skip_bad_audio=true to skip such rows"


def _rows(rows: Any, processor: Any, config: WorkerConfig, what: str, max_label_tokens: int | None, notes: list[str]) -> Any:
    tokenizer = processor.tokenizer
    field = _source_field(config, what)
    skip_bad = config.skip_bad_audio
    longest = longest_seconds(processor.feature_extractor)
    audio_name, text_name = audio_column(rows.column_names), transcript_column(rows.column_names)
    place = clip_place(config, what, audio_name)

    def convert(row: dict[str, Any], index: int) -> dict[str, Any]:
        raw_ref = row.get(audio_name)
        try:
            ref = checked_clip(raw_ref, index, place, longest, SKIP_HINT)
        except BadAudioRow as exc:
            # Only bad data is skipped: a path refusal is a plain DataFormatError and ends the run.
            if not skip_bad:
                raise
            return {"audio": None, "labels": [], "bad_audio": f"{exc.shown}: {exc.kind}"}
        text = row.get(text_name)
        if not isinstance(text, str):
            raise DataFormatError(field, f"row {index} of the {what} data: the transcript (column '{text_name}') is {text!r}, not text; "
                                         f"every row needs one, e.g. {WORKING_EXAMPLE}")
        labels = tokenizer(text).input_ids
        if max_label_tokens is not None and len(labels) > max_label_tokens:
            raise DataFormatError(field, f"row {index} of the {what} data: the transcript is {len(labels)} tokens and the model's decoder "
                                         f"takes at most {max_label_tokens}; split the clip and its transcript, or remove the row")
        return {"audio": ref, "labels": labels, "bad_audio": None}

    # Never from the cache: a resumed run must find a deleted clip now, not halfway through.
    converted = rows.map(convert, with_indices=True, remove_columns=rows.column_names, features=_row_features(),
                         load_from_cache_file=False, desc=f"Checking {what} audio")
    return drop_bad_rows(converted, "bad_audio", field, what, notes, has="audio that cannot train",
                         whose="audio is missing, unreadable, empty or too long", setting="skip_bad_audio", kind="audio")


def _shown(ref: dict[str, Any] | None, raw: Any) -> str:
    return (ref or {}).get("path") or (raw if isinstance(raw, str) else "(embedded clip)")


def prepare(config: WorkerConfig, processor: Any, raw: RawData, model_config: Any) -> PreparedData:
    """Clips checked and transcripts tokenized, with the collator that decodes the audio."""
    from tunelab.worker.families.speech.collator import SpeechCollator

    check_audio_run(config, raw, "speech-to-text", "audio with its transcript", "a transcript column", "the transcript only")
    # Whisper's decoder has `max_target_positions`; other decoders name their length as text models do.
    max_label_tokens = getattr(model_config, "max_target_positions", None) or getattr(model_config, "max_position_embeddings", None)
    notes: list[str] = []
    train = _rows(raw.train, processor, config, "training", max_label_tokens, notes)
    _check_batch_fits(len(train), config)
    eval_set = _rows(raw.eval, processor, config, "eval", max_label_tokens, notes) if raw.eval is not None else None
    return PreparedData(train=train, eval=eval_set, format=raw.format, notes=notes,
                        collator=SpeechCollator(processor, model_config.decoder_start_token_id))


def check_audio_run(config: WorkerConfig, raw: RawData, kind: str, trains_on: str, columns: str, loss_on: str) -> None:
    """What every audio family (speech-to-text, text-to-speech) refuses before reading a row:
    data of another shape, and text-only settings. `kind` names the model ("speech-to-text"),
    `trains_on` its data, `columns` the columns beside the audio, `loss_on` where its loss is."""
    if raw.format != TRANSCRIPTION:
        raise DataFormatError("format", f"{config.model_name} is a {kind} model and trains on {trains_on}; "
                                        f"the data reads as {raw.format} with columns {raw.train.column_names}. Give an audio column "
                                        f"(file paths or an audio feature) and {columns}, e.g. {WORKING_EXAMPLE}")
    for name, on in (("packing", config.packing), ("train_on_completions", config.train_on_completions)):
        if on:
            raise DataFormatError(name, f"{name} does not apply to {kind} rows (the loss is on {loss_on}); set {name}=false")
    if config.training_type == "continued_pretraining":
        raise DataFormatError("training_type", f"continued pretraining reads raw text; {kind} trains with training_type=lora or full")
