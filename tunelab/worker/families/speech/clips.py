"""Opening an audio clip reference (`{path, bytes}`) and the longest clip a feature extractor
takes whole: shared by the data checks (`data`, which decode every clip once) and the
collator (`collator`, which decodes them again batch by batch). Torch-free."""

from __future__ import annotations

import io
from typing import Any


def longest_seconds(feature_extractor: Any) -> float | None:
    """The longest clip the feature extractor takes whole (Whisper: its 30 s window), or
    None for one that takes any length."""
    samples = getattr(feature_extractor, "n_samples", None)
    rate = getattr(feature_extractor, "sampling_rate", None)
    return samples / rate if samples and rate else None


def open_clip(ref: dict[str, Any]) -> Any:
    import soundfile

    return soundfile.SoundFile(io.BytesIO(ref["bytes"]) if ref.get("bytes") else ref["path"])
