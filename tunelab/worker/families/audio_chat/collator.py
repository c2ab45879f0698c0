"""Batches of audio chat rows: decode the clips, run the processor, place the labels.

Clips are decoded here, one batch at a time, by the speech path's `decode_clip`
(libsndfile, mixed to mono, resampled by soxr to the feature extractor's `sampling_rate`),
so a dataset of any size holds no samples beyond the current batch. The processor turns
each clip into features and expands the row's audio token into as many audio tokens as the
clip gives (Qwen2-Audio: about 25 a second); the labels are placed exactly as for images
(`VisionCollator`): text tokens keep their loss mask, audio tokens and markers take none,
and a row is never cut inside its audio tokens.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.families.audio_chat.tokens import audio_token_ids
from tunelab.worker.data.label_alignment import LabelAligner
from tunelab.worker.families.speech.collator import decode_clip
from tunelab.worker.families.vision.collator import VisionCollator


class AudioChatCollator(VisionCollator):
    media = "audio"
    shrink_hint = "use shorter clips"
    # The audio features and their mask are per clip frame, never cut to the text's width.
    kept_whole = ("input_features", "feature_attention_mask")

    def __init__(self, processor: Any, max_length: int):
        self.processor = processor
        self.max_length = max_length
        self.rate = int(processor.feature_extractor.sampling_rate)
        self.marker_ids = audio_token_ids(processor)
        self.aligner = LabelAligner(processor.tokenizer)

    def media_inputs(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        clips = [decode_clip(ref, self.rate) for row in rows for ref in row["audios"]]
        return {"audio": clips, "sampling_rate": self.rate} if clips else {}
