"""Audio chat data for an audio chat model: rows in, text tokens and clip references out.

`prepare(config, processor, raw)` turns each row (any shape `audio_chat_formats` reads) into
  text       the conversation rendered with the processor's chat template
  audios     the row's clips as `{path, bytes}` references, in audio-part order
  text_ids   the rendered text tokenized *before* the processor expands audio tokens
  loss_mask  1 on the tokens that take loss: every text token, or with
             `train_on_completions` only the assistant turns; never an audio token or
             marker (`audio_token_ids`)
— the vision chat path's columns with clips for images, so `vision_collator`'s label
alignment serves both. Every clip is decoded once here, one at a time, to check it with the
speech path's `checked_clip`: a missing file, one that does not decode, an empty clip or
one longer than the feature extractor's window is an error naming the row, the path and
the field before training; with `skip_bad_audio` the row is dropped instead, and the
count and the first few rows and paths come back as a note the worker reports. Relative
paths resolve against the dataset file's folder, and in a run a server started a clip
outside the data roots is refused, skip or not. Samples are kept nowhere:
`audio_chat_collator` decodes again, batch by batch.
Torch-free apart from the collator it hands on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab.worker.families.audio_chat.formats import WORKING_EXAMPLE, audio_list_column, audio_messages, has_audio
from tunelab.worker.data.prepare import PreparedData
from tunelab.worker.data.formats import DataFormatError, conversation_column, image_column
from tunelab.worker.data.sources import DETECTION_SAMPLE_ROWS, RawData
from tunelab.worker.families.speech.data import SKIP_HINT, BadAudioRow, checked_clip, clip_place, longest_seconds
from tunelab.worker.families.speech.formats import TRANSCRIPTION, audio_column
from tunelab.worker.families.audio_chat.tokens import audio_token_ids
from tunelab.worker.families.vision.data import _source_field, drop_bad_rows, labelled_rows, prepare_media_rows, tokens_and_loss_mask

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

AUDIO_CHAT_COLUMNS = ("text", "audios", "text_ids", "loss_mask")
def raw_has_audio(raw: RawData) -> bool:
    rows = raw.train
    sample = [rows[i] for i in range(min(DETECTION_SAMPLE_ROWS, len(rows)))]
    return has_audio(raw.format, rows.column_names, sample)


def check_shape(config: WorkerConfig, raw: RawData) -> None:
    """Image data on a model that listens rather than sees: say what was expected and what was found."""
    columns = raw.train.column_names
    if raw.format == "caption" or image_column(columns):
        raise DataFormatError("format", f"{config.model_name} is an audio chat model and trains on chat messages with audio "
                                        f"parts (or audio with its transcript); the data reads as {raw.format} with images "
                                        f"(columns {columns}). Give clips instead of images, e.g. {WORKING_EXAMPLE}, "
                                        "or train an image-text-to-text model on this data")


def _row_features() -> Any:
    """The converted rows' columns, stated rather than inferred: a first batch of skipped
    rows must not fix the column types for the good rows after it."""
    import datasets

    return datasets.Features({
        "text": datasets.Value("string"),
        "audios": datasets.List({"path": datasets.Value("string"), "bytes": datasets.Value("binary")}),
        "text_ids": datasets.List(datasets.Value("int64")),
        "loss_mask": datasets.List(datasets.Value("int64")),
        "bad_audio": datasets.Value("string"),
    })


def _clip_column(rows: Any, fmt: str) -> str:
    """How an error names where a row's clips are."""
    columns = rows.column_names
    found = audio_column(columns) if fmt == TRANSCRIPTION else audio_list_column(columns)
    return found or f"{conversation_column(columns) or 'messages'} audio parts"


def _rows(rows: Any, fmt: str, processor: Any, config: WorkerConfig, what: str, notes: list[str]) -> Any:
    completions = config.train_on_completions
    skip_bad = config.skip_bad_audio
    longest = longest_seconds(processor.feature_extractor)
    place = clip_place(config, what, _clip_column(rows, fmt))
    audio_ids = audio_token_ids(processor)

    def convert(row: dict[str, Any], index: int) -> dict[str, Any]:
        messages, refs = audio_messages(row, fmt, config)
        clips = []
        for ref in refs:
            try:
                clips.append(checked_clip(ref, index, place, longest, SKIP_HINT))
            except BadAudioRow as exc:
                # Only bad data is skipped: a path refusal is a plain DataFormatError and ends the run.
                if not skip_bad:
                    raise
                return {"text": "", "audios": [], "text_ids": [], "loss_mask": [], "bad_audio": f"{exc.shown}: {exc.kind}"}
        text, ids, mask = tokens_and_loss_mask(processor, messages, completions, audio_ids)
        return {"text": text, "audios": clips, "text_ids": ids, "loss_mask": mask, "bad_audio": None}

    # Never from the cache: a resumed run must find a deleted clip now, not halfway through.
    converted = rows.map(convert, with_indices=True, remove_columns=rows.column_names, features=_row_features(),
                         load_from_cache_file=False, desc=f"Checking {what} audio")
    converted = drop_bad_rows(converted, "bad_audio", _source_field(config, what), what, notes, has="audio that cannot train",
                              whose="audio is missing, unreadable, empty or too long", setting="skip_bad_audio", kind="audio")
    return labelled_rows(converted, what, completions)


def prepare(config: WorkerConfig, processor: Any, raw: RawData) -> PreparedData:
    """Audio chat rows checked and tokenized, with the collator that decodes their clips."""
    from tunelab.worker.families.audio_chat.collator import AudioChatCollator

    return prepare_media_rows(
        config, raw, "audio chat", "audio",
        lambda rows, what, notes: _rows(rows, raw.format, processor, config, what, notes),
        lambda: AudioChatCollator(processor, config.max_seq_length))
