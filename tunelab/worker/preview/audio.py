"""The dataset preview of audio + transcript data (run inside `preview_child`, never in the server).

Each shown row is its clip's reference and the transcript, which is what the model learns
to write. The preview also counts the rows training would refuse (or skip, with
`skip_bad_audio`): a clip that is missing, whose header libsndfile cannot read, that
holds no samples, that lies outside the folders tunelab may read, or — when a model is
given and its feature extractor has a fixed window (Whisper: 30 s) — that is longer than
the window; for a text-to-speech model, longer than `max_seq_length` leaves room for. Only headers are read (training decodes every clip whole at its start, so a
clip with a good header and broken data is found there), over the first
`MAX_CHECKED_ROWS` rows, so a huge dataset still previews quickly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tunelab import paths
from tunelab.worker.preview.limits import COLUMN_CHARS, MAX_COLUMNS, ROW_CHARS, TOTAL_CHARS, truncate

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

# A header read each (well under a millisecond for a small local file): a few seconds at most.
MAX_CHECKED_ROWS = 5_000


def _longest(model_name: str | None, config: WorkerConfig) -> float | None:
    """The model's window in seconds, or None (no model, no fixed window, or it does not load:
    the length check is then left to training)."""
    if not model_name:
        return None
    try:
        from tunelab.worker.families.tts.model import is_tts_model

        if is_tts_model(config.model_copy(update={"model_name": model_name})):
            return _tts_longest(config.model_copy(update={"model_name": model_name}))
        from transformers import AutoFeatureExtractor

        from tunelab.worker.families.speech.data import longest_seconds

        extractor = AutoFeatureExtractor.from_pretrained(model_name, token=config.hf_token or None,
                                                         trust_remote_code=config.trust_remote_code)
        return longest_seconds(extractor)
    except Exception:  # any loader failure only leaves the length unchecked
        return None


def _tts_longest(config: WorkerConfig) -> float | None:
    """A text-to-speech model's longest clip: the audio max_seq_length leaves room for
    beside the layout's six markers (its text takes more, so training may refuse a few more
    clips than counted here), with the codec the run would use, when it is a local folder."""
    from pathlib import Path

    from tunelab.worker.families.tts.clips import codec_settings, seconds_room
    from tunelab.worker.families.tts.codec import codec_source

    folder = Path(codec_source(config)).expanduser()
    if not (folder / "config.json").is_file():
        return None  # a hub codec: the length is left to training
    return seconds_room(codec_settings(folder), config.max_seq_length - 6)


def _clip_is_bad(ref: Any, folders: list, field: str, longest: float | None) -> bool:
    import io

    import soundfile

    from tunelab.worker.families.vision.data import image_reference

    try:
        clip = image_reference(ref, folders)
        if not clip["bytes"]:
            paths.check_readable(clip["path"], field)
        info = soundfile.info(io.BytesIO(clip["bytes"]) if clip["bytes"] else clip["path"])
    except Exception:  # missing, not audio, refused: what training would not take
        return True
    seconds = info.frames / info.samplerate if info.samplerate else 0.0
    return info.frames <= 0 or (longest is not None and seconds > longest + 1e-6)


def bad_audio_rows(data: Any, column: str, config: WorkerConfig, longest: float | None) -> tuple[int, int]:
    """(rows with a clip training would not take, rows checked) over the first MAX_CHECKED_ROWS rows."""
    from tunelab.worker.families.vision.data import data_folders

    folders = data_folders(config, "training")
    field = "local_datasets" if config.local_datasets else "dataset"
    checked = data.select(range(min(len(data), MAX_CHECKED_ROWS)))
    bad = sum(1 for ref in checked[column] if _clip_is_bad(ref, folders, field, longest))
    return bad, len(checked)


def build_audio_preview(config: WorkerConfig, rows: int, model_name: str | None, raw: Any) -> dict[str, Any]:
    from tunelab.worker.families.speech.formats import audio_column, transcript_column

    audio, text = audio_column(raw.train.column_names), transcript_column(raw.train.column_names)
    shown, budget = [], TOTAL_CHARS
    for index in range(min(rows, len(raw.train))):
        if budget <= 0:
            break
        row = raw.train[index]
        ref = row.get(audio)
        clip = (ref.get("path") or "(embedded clip)") if isinstance(ref, dict) else str(ref)
        line = truncate(f"[audio: {clip}] {row.get(text) or ''}", min(ROW_CHARS, budget))
        budget -= len(line)
        shown.append({"index": index, "text": line, "messages": None})
    bad, checked = bad_audio_rows(raw.train, audio, config, _longest(model_name, config))
    return {"format": raw.format, "columns": [truncate(str(name), COLUMN_CHARS) for name in raw.train.column_names[:MAX_COLUMNS]],
            "row_count": len(raw.train), "rendered_with": "raw_text", "note": None, "rows": shown,
            "bad_audio_rows": bad, "audio_rows_checked": checked}
