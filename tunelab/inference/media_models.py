"""The inference child's models that read more than text: vision-language (images), audio
chat (clips) and speech-to-text (for evaluation), each loaded with the processor its run
saved beside the weights, as its training family loads it.

`family_of` asks the family specs (`tunelab/families`) which family the model is, which
auto class loads it, which media a chat part may carry and which worker module loads its
processor (the spec's `processor`; a family without one reads only text). `encode` turns chat messages in the
child's form (`media_input`: `{"type": "image" | "audio", "data": base64}` parts) into the
model's inputs exactly as the family's collator builds a training row: the processor's
chat template renders the turns with `{"type": "image"}` / `{"type": "audio"}` parts, and
the processor gets the decoded pictures (shrunk to the run's `vision_image_size`) or clips
(resampled to the feature extractor's rate).
"""

from __future__ import annotations

import base64
import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MediaFamily:
    name: str                      # the run modality (events.MODALITIES)
    media: str | None              # the chat part it reads: image, audio, or None (speech-to-text does not chat)
    auto_class: str                # the transformers class its spec names
    serves: str                    # chat, or transcribe (evaluated, not chatted with): its spec's
    processor: str                 # the worker module its spec names: load_processor, eval_rows

    def model_class(self) -> Any:
        import transformers

        return getattr(transformers, self.auto_class)

    def module(self) -> Any:
        return importlib.import_module(self.processor)


def family_of(model_config: Any) -> MediaFamily | None:
    """The media family a model's config names (its spec, `families.detect`, as training tells
    it), or None for a model that reads only text."""
    from tunelab import families

    spec = families.detect(families.ModelFiles(config=model_config.to_dict(), transformers=True, model_config=model_config))
    if spec.processor is None:
        return None
    return MediaFamily(spec.modality, spec.media, spec.auto_class, spec.serves, spec.processor)


def load_processor(family: MediaFamily, request: dict[str, Any]) -> Any:
    """The processor the run saved beside its weights (its tokenizer and chat template as trained)."""
    from tunelab.worker.run_config import model_reference

    return family.module().load_processor(model_reference(request["weights"], trust_remote_code=bool(request["trust_remote_code"]),
                                                          speech_language=request.get("speech_language")))


def _image(data: str, max_side: int) -> Any:
    from tunelab.worker.families.vision.collator import open_image

    return open_image({"bytes": base64.b64decode(data), "path": None}, max_side)


def _clip(data: str, rate: int) -> Any:
    from tunelab.worker.families.speech.collator import decode_clip

    return decode_clip({"bytes": base64.b64decode(data), "path": None}, rate)


def template_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Messages for the chat template (media parts without their data) and the media, in part order."""
    shown, media = [], []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            shown.append(message)
            continue
        parts = []
        for part in content:
            if part.get("type") in ("image", "audio"):
                media.append((part["type"], part["data"]))
                parts.append({"type": part["type"]})
            else:
                parts.append({"type": "text", "text": str(part.get("text") or "")})
        shown.append({**message, "content": parts})
    return shown, media


def encode(processor: Any, family: MediaFamily, image_size: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's inputs (input_ids, attention_mask, pixel values or audio features) for a chat."""
    from tunelab.inference.child_errors import GenerationInputError
    from tunelab.worker.data.formats import DataFormatError
    from tunelab.worker.data.tokenization import render

    shown, media = template_messages(messages)
    wrong = sorted({kind for kind, _ in media if kind != family.media})
    if wrong:
        raise GenerationInputError("messages", f"this model takes {family.media or 'no'} media parts, not {' or '.join(wrong)}")
    try:
        text = render(processor, shown, add_generation_prompt=True)
    except DataFormatError as exc:
        raise GenerationInputError("messages", exc.message) from None
    extra: dict[str, Any] = {}
    try:
        if media and family.media == "image":
            extra = {"images": [[_image(data, image_size) for _, data in media]]}
        elif media:
            rate = int(processor.feature_extractor.sampling_rate)
            extra = {"audio": [_clip(data, rate) for _, data in media], "sampling_rate": rate}
    except Exception as exc:  # a picture PIL cannot decode, a clip libsndfile cannot read
        raise GenerationInputError("messages", f"a {family.media} part cannot be decoded ({exc})") from None
    return dict(processor(text=[text], return_tensors="pt", add_special_tokens=False, **extra))
