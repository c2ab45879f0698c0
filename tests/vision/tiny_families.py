"""Tiny random-init vision-language models of the families transformers ships, built offline.

Each builder makes one family's model from its own config classes at toy sizes (hidden
32-64, one or two layers, a vision tower over 32-pixel images), and a real processor
assembled from local parts: the demo's BPE tokenizer with the family's special tokens,
the family's image processor constructed in code (its PIL backend: this machine's CPU
torch has no torchvision), and a chat template that writes the family's image markup.
`build(name, folder, corpus)` saves model + processor into `folder` the way a hub
checkpoint is laid out, so tunelab loads it through AutoProcessor / AutoModelForImageTextToText
exactly as it would a downloaded one. `real_families` builds Gemma 3 and SmolVLM
(`gemma3_around`, `idefics3_around`) around their real tokenizers instead.

Left out: Mistral 3 (transformers' PixtralProcessor requires torchvision outright, even
with its PIL image processor) and SmolVLM (its processor imports `num2words`, which is
not installed here; Idefics3 covers the same architecture).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from tunelab.demos.vision import VISION_CHAT_TEMPLATE
from tunelab.worker.families.vision.model import images_only

SIDE = 32  # pixels the vision towers see
PATCH = 8


def chat_template(image_markup: str) -> str:
    """The demo's parts-aware template, writing `image_markup` for each image part."""
    return VISION_CHAT_TEMPLATE.replace("'<image>'", repr(image_markup))


def _tokenizer(corpus: list[str], specials: tuple[str, ...], markup: str, **named: str) -> Any:
    from tunelab.demos.assets import train_demo_tokenizer

    tokenizer = train_demo_tokenizer(corpus, extra_special_tokens=specials, vocab_size=400)
    tokenizer.chat_template = chat_template(markup)
    if named:
        # Named multimodal tokens (Gemma 3's boi_token, ...), saved in tokenizer_config.json the
        # way a hub tokenizer declares them, so the reloaded tokenizer has them too.
        tokenizer._set_model_specific_special_tokens(special_tokens=named)
    return tokenizer


def _llama(tokenizer: Any, **extra: Any) -> dict[str, Any]:
    return {"model_type": "llama", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id, "tie_word_embeddings": False, **extra}


def _clip() -> dict[str, Any]:
    return {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "image_size": SIDE, "patch_size": PATCH, "projection_dim": 32}


def _qwen_text(tokenizer: Any) -> dict[str, Any]:
    # head_dim 16: the three mrope sections (time, height, width) share its 8 frequencies.
    return {"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}}


QWEN_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
QWEN_MARKUP = "<|vision_start|><|image_pad|><|vision_end|>"


def _qwen_ids(tokenizer: Any) -> dict[str, int]:
    ids = tokenizer.convert_tokens_to_ids
    return {"image_token_id": ids("<|image_pad|>"), "video_token_id": ids("<|video_pad|>"),
            "vision_start_token_id": ids("<|vision_start|>"), "vision_end_token_id": ids("<|vision_end|>")}


def _qwen_image_processor(cls: Any, patch: int) -> Any:
    # At most 32x32 pixels (the min/max pixel counts), in `patch`-pixel patches merged 2x2
    # into image tokens: four per image.
    return cls(patch_size=patch, merge_size=2, temporal_patch_size=2,
               size={"shortest_edge": 4 * patch * patch, "longest_edge": SIDE * SIDE})


def qwen2_vl(corpus: list[str]) -> tuple[Any, Any]:
    from transformers import Qwen2VLConfig, Qwen2VLImageProcessorPil, Qwen2VLProcessor

    tokenizer = _tokenizer(corpus, QWEN_TOKENS, QWEN_MARKUP)
    config = Qwen2VLConfig(text_config=_qwen_text(tokenizer), **_qwen_ids(tokenizer),
                           vision_config={"depth": 1, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2,
                                          "patch_size": PATCH, "spatial_merge_size": 2, "temporal_patch_size": 2})
    processor = images_only(Qwen2VLProcessor)(image_processor=_qwen_image_processor(Qwen2VLImageProcessorPil, PATCH), tokenizer=tokenizer,
                                 chat_template=tokenizer.chat_template)
    return config, processor


def qwen2_5_vl(corpus: list[str]) -> tuple[Any, Any]:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLProcessor, Qwen2VLImageProcessorPil

    tokenizer = _tokenizer(corpus, QWEN_TOKENS, QWEN_MARKUP)
    config = Qwen2_5_VLConfig(text_config=_qwen_text(tokenizer), **_qwen_ids(tokenizer),
                              vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                                             "out_hidden_size": 64, "patch_size": PATCH, "spatial_merge_size": 2,
                                             "temporal_patch_size": 2, "window_size": 16, "fullatt_block_indexes": [1]})
    processor = images_only(Qwen2_5_VLProcessor)(image_processor=_qwen_image_processor(Qwen2VLImageProcessorPil, PATCH), tokenizer=tokenizer,
                                    chat_template=tokenizer.chat_template)
    return config, processor


def qwen3_vl(corpus: list[str]) -> tuple[Any, Any]:
    from transformers import Qwen2VLImageProcessorPil, Qwen3VLConfig, Qwen3VLProcessor

    tokenizer = _tokenizer(corpus, QWEN_TOKENS, QWEN_MARKUP)
    text = {**_qwen_text(tokenizer), "head_dim": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3], "mrope_interleaved": True}}
    config = Qwen3VLConfig(text_config=text, **_qwen_ids(tokenizer),
                           vision_config={"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                                          "out_hidden_size": 64, "patch_size": PATCH, "spatial_merge_size": 2,
                                          "temporal_patch_size": 2, "num_position_embeddings": 16,
                                          "deepstack_visual_indexes": [0]})
    processor = images_only(Qwen3VLProcessor)(image_processor=_qwen_image_processor(Qwen2VLImageProcessorPil, PATCH), tokenizer=tokenizer,
                                 chat_template=tokenizer.chat_template)
    return config, processor


GEMMA3_TOKENS = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}


def gemma3(corpus: list[str]) -> tuple[Any, Any]:
    tokenizer = _tokenizer(corpus, tuple(GEMMA3_TOKENS.values()), "<start_of_image>", **GEMMA3_TOKENS)
    return gemma3_around(tokenizer)


def gemma3_around(tokenizer: Any) -> tuple[Any, Any]:
    """Gemma 3's tiny model and processor around `tokenizer` (which names GEMMA3_TOKENS)."""
    from transformers import Gemma3Config, Gemma3ImageProcessorPil, Gemma3Processor

    ids = tokenizer.convert_tokens_to_ids
    text = {"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 1024,
            "sliding_window": 64, "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": SIDE, "patch_size": PATCH}
    # 4x4 patches pooled to 2x2: four soft tokens per image.
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, boi_token_index=ids("<start_of_image>"),
                          eoi_token_index=ids("<end_of_image>"), image_token_index=ids("<image_soft_token>"))
    image_processor = Gemma3ImageProcessorPil(size={"height": SIDE, "width": SIDE})
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_length=4,
                                chat_template=tokenizer.chat_template)
    return config, processor


def mllama(corpus: list[str]) -> tuple[Any, Any]:
    from transformers import MllamaConfig, MllamaImageProcessorPil, MllamaProcessor

    tokenizer = _tokenizer(corpus, ("<|image|>", "<|python_tag|>"), "<|image|>")
    text = {"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "cross_attention_layers": [1], "max_position_embeddings": 1024,
            "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_global_layers": 1,
              "attention_heads": 2, "image_size": SIDE, "patch_size": PATCH, "max_num_tiles": 2,
              "intermediate_layers_indices": [0], "vision_output_dim": 64,
              "supported_aspect_ratios": [[1, 1], [1, 2], [2, 1]]}
    config = MllamaConfig(text_config=text, vision_config=vision, image_token_index=tokenizer.convert_tokens_to_ids("<|image|>"))
    image_processor = MllamaImageProcessorPil(size={"height": SIDE, "width": SIDE}, max_image_tiles=2)
    processor = MllamaProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=tokenizer.chat_template)
    return config, processor


def llava_next(corpus: list[str]) -> tuple[Any, Any]:
    from transformers import LlavaNextConfig, LlavaNextImageProcessorPil, LlavaNextProcessor

    tokenizer = _tokenizer(corpus, ("<image>",), "<image>")
    pinpoints = [[SIDE, SIDE], [SIDE, 2 * SIDE], [2 * SIDE, SIDE]]
    config = LlavaNextConfig(vision_config=_clip(), text_config=_llama(tokenizer), image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
                             image_grid_pinpoints=pinpoints, vision_feature_layer=-1, vision_feature_select_strategy="default",
                             image_seq_length=16, tie_word_embeddings=False)
    image_processor = LlavaNextImageProcessorPil(size={"shortest_edge": SIDE}, crop_size={"height": SIDE, "width": SIDE},
                                                 image_grid_pinpoints=pinpoints)
    processor = LlavaNextProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH,
                                   vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                   chat_template=tokenizer.chat_template)
    return config, processor


IDEFICS3_TOKENS = ("<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>")


def idefics3(corpus: list[str]) -> tuple[Any, Any]:
    tokenizer = _tokenizer(corpus, IDEFICS3_TOKENS, "<image>")
    return idefics3_around(tokenizer)


def idefics3_around(tokenizer: Any) -> tuple[Any, Any]:
    """Idefics3's tiny model and processor around `tokenizer` (which has IDEFICS3_TOKENS)."""
    from transformers import Idefics3Config, Idefics3ImageProcessorPil, Idefics3Processor

    image_processor = Idefics3ImageProcessorPil(size={"longest_edge": SIDE}, max_image_size={"longest_edge": SIDE},
                                                do_image_splitting=False)
    # (32/8)^2 patches, pixel-shuffled by scale_factor 2: four image tokens per image.
    processor = Idefics3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=4,
                                  chat_template=tokenizer.chat_template)
    # The processor adds its row/column tokens to the tokenizer: the vocabulary is final only now.
    config = Idefics3Config(text_config=_llama(tokenizer), scale_factor=2, image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
                            vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                           "num_attention_heads": 2, "image_size": SIDE, "patch_size": PATCH},
                            tie_word_embeddings=False)
    return config, processor


FAMILIES: dict[str, Callable[[list[str]], tuple[Any, Any]]] = {
    "qwen2_vl": qwen2_vl, "qwen2_5_vl": qwen2_5_vl, "qwen3_vl": qwen3_vl, "gemma3": gemma3, "mllama": mllama,
    "llava_next": llava_next, "idefics3": idefics3,
}


def build(name: str, folder: Path, corpus: list[str]) -> Path:
    """Save family `name`'s tiny model and processor into `folder`."""
    return save(*FAMILIES[name](corpus), folder)


def save(config: Any, processor: Any, folder: Path) -> Path:
    """A tiny random-init model of `config` and its processor, saved into `folder`."""
    import torch
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder
