"""The loss mask carried over to a processor's ids (`label_alignment`), on a real BPE
tokenizer that has tokens for newline runs, the way Gemma's has: the processor writes
"\\n\\n" around the image tokens as Gemma3Processor does, the row's own "\\n" merges into
"\\n\\n\\n", and the row's words still get exactly their loss."""

from __future__ import annotations

import pytest

from tunelab.demos.assets import train_demo_tokenizer
from tunelab.worker.context import RunSettingError
from tunelab.worker.data.label_alignment import LabelAligner

IMAGE = "<image>"
ROW = f"Look\n{IMAGE}Name the shape.\nA red circle."
# What a Gemma-style processor makes of ROW: newlines around the expanded image tokens.
PROCESSED = ROW.replace(IMAGE, f"\n\n{IMAGE * 3}\n\n")


@pytest.fixture(scope="module")
def tokenizer():
    # A newline run alone (as before a special token) is what teaches BPE the "\n\n\n" token.
    corpus = ["Look\n\n\n", "\n\nName the shape.\nA red circle.\n\nA blue square.\n"] * 20
    return train_demo_tokenizer(corpus, extra_special_tokens=(IMAGE,), vocab_size=300)


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _trained_text(tokenizer, processed: list[int], mask: list[int]) -> list[str]:
    return [tokenizer.decode([t]) for t, keep in zip(processed, mask) if keep]


def test_a_merged_newline_run_takes_no_loss_and_the_words_keep_theirs(tokenizer):
    row, processed = _ids(tokenizer, ROW), _ids(tokenizer, PROCESSED)
    assert "\n\n\n" in [tokenizer.decode([t]) for t in processed]  # the merge this is about happens
    image = tokenizer.convert_tokens_to_ids(IMAGE)
    mask, media_end = LabelAligner(tokenizer).align(row, [0 if t == image else 1 for t in row], processed)
    trained = _trained_text(tokenizer, processed, mask)
    # Every row token but the merged "\n" (and the image) trains; nothing the processor wrote does.
    assert "".join(trained) == ROW.replace(f"\n{IMAGE}", "")
    assert media_end > max(i for i, t in enumerate(processed) if t == image)  # the image is never cut


def test_only_the_reply_trains_when_only_the_reply_takes_loss(tokenizer):
    row, processed = _ids(tokenizer, ROW), _ids(tokenizer, PROCESSED)
    reply_start = len(ROW) - len("A red circle.")
    offsets = tokenizer(ROW, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    mask, _ = LabelAligner(tokenizer).align(row, [int(start >= reply_start) for start, _ in offsets], processed)
    assert "".join(_trained_text(tokenizer, processed, mask)) == "A red circle."


def test_text_the_processor_rewrote_is_an_error_not_misplaced_labels(tokenizer):
    row = _ids(tokenizer, ROW)
    rewritten = _ids(tokenizer, PROCESSED.replace("red", "blue"))
    image = tokenizer.convert_tokens_to_ids(IMAGE)
    with pytest.raises(RunSettingError) as refused:
        LabelAligner(tokenizer).align(row, [0 if t == image else 1 for t in row], rewritten)
    assert refused.value.field == "model_name" and "red" in refused.value.message
    # The same rewrite in text that takes no loss changes no label: nothing to place.
    mask, _ = LabelAligner(tokenizer).align(row, [0] * len(row), rewritten)
    assert not any(mask)
