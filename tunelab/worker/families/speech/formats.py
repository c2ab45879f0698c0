"""Audio + transcript rows: which columns hold the clip and its words.

The `transcription` format is a table with an audio column and a transcript column:
  audio       `audio`, `audio_path`, `audio_file`, `audio_filepath` always; `file`, `path`,
              `file_name`, `filename`, `file_path` when their values name audio files
              (a `.wav`, `.flac`, ... suffix), so a code dataset's `path` column stays text.
              A value is a path (relative ones are resolved by `speech_data` against the
              dataset file's folder) or a dict with `bytes` and/or `path` — a hub or
              parquet audio feature read without decoding (`undecoded_audio`).
  transcript  `text`, `sentence`, `transcription`, `transcript` (or any column mapped to
              `text` with column_mapping).
Torch-free; `datasets` only inside `undecoded_audio`.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.data.rows import DataFormatError

TRANSCRIPTION = "transcription"
AUDIO_COLUMNS = ("audio", "audio_path", "audio_file", "audio_filepath")
# Names that hold audio only when their values say so (they are common in text data too).
MAYBE_AUDIO_COLUMNS = ("file", "path", "file_name", "filename", "file_path")
TRANSCRIPT_COLUMNS = ("text", "sentence", "transcription", "transcript")
# What libsndfile (soundfile) decodes; the suffix decides nothing else.
AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".oga", ".opus", ".aiff", ".aif", ".aifc", ".au", ".w64", ".caf")
WORKING_EXAMPLE = '{"audio": "clips/0001.wav", "text": "the words spoken in the clip"}'


def _looks_like_audio(value: Any) -> bool:
    if isinstance(value, dict):
        return bool(value.get("bytes")) or _looks_like_audio(value.get("path"))
    return isinstance(value, str) and value.lower().endswith(AUDIO_SUFFIXES)


def audio_column(columns: list[str], sample_rows: list[dict[str, Any]] | None = None) -> str | None:
    """The column holding the clips, or None. With `sample_rows` (detection) a `file`/`path`
    column counts only when its values name audio files; without them (the format is
    already known to be transcription) it counts as it is."""
    found = next((c for c in AUDIO_COLUMNS if c in columns), None)
    if found:
        return found
    for name in MAYBE_AUDIO_COLUMNS:
        if name not in columns:
            continue
        if sample_rows is None:
            return name
        values = [row.get(name) for row in sample_rows if row.get(name) is not None]
        if values and all(_looks_like_audio(v) for v in values):
            return name
    return None


def transcript_column(columns: list[str]) -> str | None:
    return next((c for c in TRANSCRIPT_COLUMNS if c in columns), None)


def transcription_shape(columns: list[str], sample_rows: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(audio column, transcript column) of transcription data; None without audio. Audio
    without a transcript is an error that says what was expected."""
    audio = audio_column(columns, sample_rows)
    if audio is None:
        return None
    text = transcript_column([c for c in columns if c != audio])
    if text is None:
        raise DataFormatError("column_mapping", f"the data has audio (column '{audio}') but no transcript column; the columns are "
                                                f"{list(columns)}. Name it {'/'.join(TRANSCRIPT_COLUMNS)} or map it, e.g. "
                                                f"column_mapping: {{text: your_column}}. A working row: {WORKING_EXAMPLE}")
    return audio, text


def undecoded_audio(rows: Any) -> Any:
    """Hub/parquet audio features decode (through torchcodec) whenever a row is read: read
    them as `{bytes, path}` instead, so a row costs its compressed size until a batch
    decodes it with soundfile."""
    import datasets

    features = getattr(rows, "features", None) or {}
    for name, feature in features.items():
        if isinstance(feature, datasets.Audio) and feature.decode:
            rows = rows.cast_column(name, datasets.Audio(decode=False))
    return rows
