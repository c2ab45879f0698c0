"""Check every clip of a text-to-speech split, then encode it through the run's codec cache.

Shared by both text-to-speech families (Orpheus over SNAC, Sesame CSM over Mimi), which differ
only in how long a clip may be and what one encoded clip is. `check_split` finds a split's
cached codes (`tts_cache`), else checks every clip (`speech_data.checked_clip`: missing,
unreadable, empty or too long is a `BadAudioRow` naming the row, the path and the field; a
path outside a served run's data roots is refused, never skipped) before any is encoded —
so a bad clip is reported before minutes of codec work, never halfway through it. With
`skip_bad_audio` a bad row's entry is its reason, `"<path>: <kind>"`, and the family leaves
the row out; the cache keeps that reason, so a resumed run skips (and counts) the same rows
without reading a clip. `encode_split` then encodes the checked clips and writes the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tunelab.worker.families.speech.data import SKIP_HINT, BadAudioRow, checked_clip, clip_place
from tunelab.worker.families.speech.formats import audio_column

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


@dataclass
class CheckedSplit:
    """One split's clips, ready to encode: its cached codes, or each row's checked clip reference (or, skipped, its reason)."""
    what: str
    cache: Path | None  # where its codes are (or go)
    codes: list[Any] | None  # from the cache, else None
    checked: list[Any]


def check_split(rows: Any, config: WorkerConfig, codec: Any, what: str, output_dir: Path,
                longest: list[float | None], limit: str) -> CheckedSplit:
    """Row i's clip may last `longest[i]` seconds (None: any length); `limit` says what sets that."""
    from tunelab.worker.families.tts import cache as tts_cache
    from tunelab.worker.families.vision.data import image_reference

    skip_bad = config.skip_bad_audio
    audio_name = audio_column(rows.column_names)
    place = clip_place(config, what, audio_name)
    raw_refs = rows[audio_name]
    try:
        refs = [image_reference(ref, place.folders) for ref in raw_refs]
    except Exception:  # a reference of the wrong shape: checked_clip names its row below
        refs = None
    key = tts_cache.cache_key(codec.fingerprint, codec.rate, tts_cache.dataset_fingerprint(config, rows), refs) if refs else None
    path = tts_cache.cache_file(output_dir, what, key) if key else None
    cached = tts_cache.load(path, len(rows)) if path else None
    # A cache that skipped rows serves only a run that skips them; otherwise they are checked (and refused) again.
    if cached is not None and (skip_bad or not any(isinstance(entry, str) for entry in cached)):
        return CheckedSplit(what, path, cached, [])
    checked: list[Any] = []
    for index, (raw_ref, most) in enumerate(zip(raw_refs, longest)):
        try:
            checked.append(checked_clip(raw_ref, index, place, most, SKIP_HINT, limit))
        except BadAudioRow as exc:
            if not skip_bad:
                raise
            checked.append(f"{exc.shown}: {exc.kind}")
    return CheckedSplit(what, path, None, checked)


def encode_split(split: CheckedSplit, codec: Any, encode: Callable[[Any], Any]) -> tuple[list[Any], int, str]:
    """Every row's codes (or, skipped, its reason), the clips this call encoded, and a note:
    from the cache, else each checked clip decoded at the codec's rate, `encode`d and cached."""
    from tunelab.worker.families.tts import cache as tts_cache
    from tunelab.worker.families.speech.collator import decode_clip

    if split.codes is not None:
        reused = sum(1 for entry in split.codes if not isinstance(entry, str))
        return split.codes, 0, f"Reused the codec tokens of {reused} {split.what} clips cached in {split.cache}"
    codes = [ref if isinstance(ref, str) else encode(decode_clip(ref, codec.rate)) for ref in split.checked]
    if split.cache:
        tts_cache.save(split.cache, codes)
    encoded = sum(1 for entry in codes if not isinstance(entry, str))
    return codes, encoded, f"Encoded {encoded} {split.what} clips to codec tokens (cached in {split.cache})"
