"""Batches of image-text rows: decode the images, run the processor, place the labels.

Images are decoded here, one batch at a time, and shrunk so the longest side is at most
`vision_image_size` (aspect kept) before the processor sees them — so a dataset of any
size holds no decoded pixels beyond the current batch.

Labels: the processor expands each image placeholder into the model's image tokens, so
its token ids differ from the row's `text_ids` exactly where images went; `label_alignment`
carries the row's `loss_mask` over to the processor's ids (everything the processor
inserted takes no loss, nor does any token that stands for an image, `image_token_ids`).
Rows longer than `max_seq_length` are cut after it, but never inside an image's tokens
(the model needs all of them): such a row keeps its image whole.
"""

from __future__ import annotations

import io
from typing import Any

import torch

from tunelab.worker.context import RunSettingError
from tunelab.worker.data.label_alignment import LabelAligner
from tunelab.worker.families.vision.tokens import image_token_ids

IGNORE_INDEX = -100


def open_image(ref: dict[str, Any], max_side: int) -> Any:
    from PIL import Image

    image = Image.open(io.BytesIO(ref["bytes"]) if ref.get("bytes") else ref["path"])
    image = image.convert("RGB")  # decodes; also gives palette/alpha/grey images the three channels processors expect
    if max(image.size) > max_side:
        image.thumbnail((max_side, max_side))
    return image


class VisionCollator:
    # How the first-batch check names the rows' media, and what makes one take fewer tokens.
    media = "image"
    shrink_hint = "lower vision_image_size"
    # Batch entries that are never cut to the kept width: only the processor's per-token
    # tensors are (an audio model's features could match the batch's shape by chance).
    kept_whole: tuple[str, ...] = ()

    def __init__(self, processor: Any, max_length: int, image_size: int):
        self.processor = processor
        self.max_length = max_length
        self.image_size = image_size
        self.marker_ids = image_token_ids(processor)
        self.aligner = LabelAligner(processor.tokenizer)

    def media_inputs(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """What the processor gets beside the text: the batch's images, decoded now."""
        images = [[open_image(ref, self.image_size) for ref in row["images"]] for row in rows]
        return {"images": images} if any(images) else {}

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.processor(text=[row["text"] for row in rows], return_tensors="pt", padding=True,
                               add_special_tokens=False, **self.media_inputs(rows))
        ids, attention = batch["input_ids"], batch["attention_mask"]
        labels = torch.full_like(ids, IGNORE_INDEX)
        kept = []
        for i, row in enumerate(rows):
            length = int(attention[i].sum())
            processed = ids[i, :length].tolist()
            mask, media_end = self.aligner.align(row["text_ids"], row["loss_mask"], processed)
            length = min(length, max(self.max_length, media_end))
            mask = [0 if token in self.marker_ids else keep for token, keep in zip(processed, mask)]
            trained = torch.tensor(mask[:length], dtype=torch.bool)
            labels[i, :length][trained] = ids[i, :length][trained]
            attention[i, length:] = 0
            kept.append(length)
        width = max(kept)
        for key, value in list(batch.items()):
            if key not in self.kept_whole and torch.is_tensor(value) and value.dim() >= 2 and value.shape[:2] == ids.shape:
                batch[key] = value[:, :width]
        batch["labels"] = labels[:, :width]
        return dict(batch)

    def check_first(self, rows: Any) -> None:
        """Build the first batch before training: a processor that refuses these rows, or an
        image (or clip) alone longer than max_seq_length, is a setting to fix, not a crash at step 1."""
        first = rows[0]
        try:
            batch = self([first])
        except RunSettingError:
            raise
        except Exception as exc:
            raise RunSettingError("model_name", f"the model's processor cannot build a batch from the first row ({exc}); "
                                                f"check that the data's {self.media}s and text suit this model") from exc
        if batch["input_ids"].shape[1] > self.max_length:
            raise RunSettingError("max_seq_length", f"the first row's {self.media} tokens alone need {batch['input_ids'].shape[1]} positions, "
                                                    f"more than max_seq_length={self.max_length}; raise max_seq_length or {self.shrink_hint}")
