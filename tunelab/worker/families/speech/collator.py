"""Batches of speech-to-text rows: decode the clips, make the model's features, pad the labels.

Clips are decoded here, one batch at a time, by libsndfile (`soundfile`: wav, flac, ogg,
mp3 ...), mixed down to mono and resampled by `soxr` to the feature extractor's
`sampling_rate` — so a dataset of any size holds no samples beyond the current batch.
The feature extractor pads as its model needs (Whisper: every clip to its 30 s window).

Labels, as transformers' Whisper fine-tuning expects: the tokenized transcripts padded
with -100 (no loss on padding). The model builds its decoder input by shifting the
labels right behind `decoder_start_token_id`; where the tokenizer already starts every
transcript with that token (Whisper's <|startoftranscript|>), it is cut from the labels
so it is not there twice — the model then learns the rest of the prefix (language,
task, no-timestamps) and the words, up to <|endoftext|>.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tunelab.worker.families.speech.clips import longest_seconds, open_clip

IGNORE_INDEX = -100


def decode_clip(ref: dict[str, Any], rate: int) -> np.ndarray:
    """The clip as mono float32 samples at `rate` Hz."""
    import soxr

    with open_clip(ref) as clip:
        samples = clip.read(dtype="float32", always_2d=True)
        source_rate = clip.samplerate
    mono = samples.mean(axis=1)
    return mono if source_rate == rate else soxr.resample(mono, source_rate, rate).astype(np.float32)


def pad_labels(labels: list[list[int]], decoder_start_token_id: int | None) -> torch.Tensor:
    if decoder_start_token_id is not None and labels and all(row and row[0] == decoder_start_token_id for row in labels):
        labels = [row[1:] for row in labels]
    width = max(len(row) for row in labels)
    padded = torch.full((len(labels), width), IGNORE_INDEX, dtype=torch.long)
    for i, row in enumerate(labels):
        padded[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    return padded


class SpeechCollator:
    def __init__(self, processor: Any, decoder_start_token_id: int | None):
        self.feature_extractor = processor.feature_extractor
        self.rate = int(self.feature_extractor.sampling_rate)
        self.decoder_start_token_id = decoder_start_token_id
        # An extractor with a fixed window pads to it itself; others pad to the batch's longest clip.
        self.padding = {} if longest_seconds(self.feature_extractor) else {"padding": True}

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        clips = [decode_clip(row["audio"], self.rate) for row in rows]
        batch = dict(self.feature_extractor(clips, sampling_rate=self.rate, return_tensors="pt", **self.padding))
        batch["labels"] = pad_labels([list(row["labels"]) for row in rows], self.decoder_start_token_id)
        return batch
