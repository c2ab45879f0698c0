"""Which token ids stand for media in a processor's output (images here, audio for the
audio chat family): they never take loss, and the label alignment skips them. Shared by
the data checks (`data`) and the collator that places the labels (`collator`)."""

from __future__ import annotations

from typing import Any

# Processor attributes naming image placeholder and marker tokens (the names differ by family).
IMAGE_TOKEN_ATTRIBUTES = ("image_token", "boi_token", "eoi_token", "image_start_token", "image_end_token",
                          "fake_image_token", "global_image_token", "global_image_tag", "vision_start_token", "vision_end_token")


def image_token_ids(processor: Any) -> set[int]:
    """Ids of the tokens that stand for images, which never take loss. A processor that
    expands its placeholder into copies of the same id (LLaVA does) would otherwise let
    the alignment match the row's one placeholder to one of the copies."""
    return marker_token_ids(processor, IMAGE_TOKEN_ATTRIBUTES, "image_token_id", {"type": "image"})


def marker_token_ids(processor: Any, attributes: tuple[str, ...], id_attribute: str, part: dict[str, Any]) -> set[int]:
    """Ids of the tokens that stand for one kind of media (images, audio): the tokens the
    processor or its tokenizer names under `attributes`, its `id_attribute`, and the special
    tokens its chat template writes for `part`."""
    tokenizer = processor.tokenizer
    found = set()
    # Some families name them on the tokenizer only (Gemma 3's image_token is the tokenizer's).
    for owner in (processor, tokenizer):
        for name in attributes:
            token = getattr(owner, name, None)
            if isinstance(token, str) and token:
                token_id = tokenizer.convert_tokens_to_ids(token)
                if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
                    found.add(token_id)
    if isinstance(getattr(processor, id_attribute, None), int):
        found.add(getattr(processor, id_attribute))
    return found | template_part_tokens(processor, part)


def template_image_tokens(processor: Any) -> set[int]:
    """Special tokens the chat template itself writes for an image part. Some families name
    their image markers nowhere else: Qwen2-VL's template wraps the placeholder in
    <|vision_start|> ... <|vision_end|>."""
    return template_part_tokens(processor, {"type": "image"})


def template_part_tokens(processor: Any, part: dict[str, Any]) -> set[int]:
    """Special tokens the chat template writes for a media `part`, found by rendering a user
    turn with and without one."""
    tokenizer = processor.tokenizer

    def rendered(content: list[dict[str, Any]]) -> set[int]:
        text = processor.apply_chat_template([{"role": "user", "content": content}], tokenize=False)
        return set(tokenizer(text, add_special_tokens=False)["input_ids"])

    try:
        added = rendered([dict(part), {"type": "text", "text": "a"}]) - rendered([{"type": "text", "text": "a"}])
    except Exception:  # a template that refuses a lone user turn: the named tokens above must do
        return set()
    special = set(tokenizer.all_special_ids) | {i for i, token in tokenizer.added_tokens_decoder.items() if token.special}
    return added & special
