"""Which token ids stand for audio in an audio chat processor's output: they never take
loss. Shared by the data checks (`data`) and the collator that places the labels (`collator`)."""

from __future__ import annotations

from typing import Any

from tunelab.worker.families.vision.tokens import marker_token_ids

# Processor and tokenizer attributes naming audio placeholder and marker tokens.
AUDIO_TOKEN_ATTRIBUTES = ("audio_token", "audio_bos_token", "audio_eos_token", "boa_token", "eoa_token",
                          "audio_start_token", "audio_end_token")


def audio_token_ids(processor: Any) -> set[int]:
    """Ids of the tokens that stand for audio, which never take loss."""
    return marker_token_ids(processor, AUDIO_TOKEN_ATTRIBUTES, "audio_token_id", {"type": "audio"})
