"""The vision demo: a tiny random-init LLaVA (CLIP vision tower + the demo's Llama) with a
real processor and chat template, and generated images of coloured shapes whose
captions can be learnt from the pixels — all built offline in a few seconds.

Built once and cached under `<home>/cache/vision-demo-v1` (or any folder given). The
data comes in the shapes people publish (see `VisionDemoAssets`), all pointing at the
same PNG files by paths relative to the data file.
Heavy imports (torch, transformers, PIL) happen only inside `build_vision_demo_assets`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from tunelab.demos.assets import ModelDataAssets, build_atomically, chat_demo_config, ensure_built

VISION_DEMO_VERSION = "vision-demo-v1"
IMAGE_TOKEN = "<image>"
# The demo chat template, taught to render content given as a list of parts: an image
# part becomes the processor's image placeholder, a text part its text.
VISION_CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|' + m['role'] + '|>\n' }}"
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)
SHAPE_COLOURS = {"red": (220, 30, 30), "blue": (30, 60, 220), "green": (30, 170, 60), "yellow": (235, 215, 30)}
SHAPES = ("circle", "square", "triangle")
QUESTIONS = ("What is in the picture?", "Describe the image.")
IMAGE_SIDE = 64  # pixels of each generated PNG; the processor resizes to the tower's 32
N_IMAGES = 96


@dataclass(frozen=True)
class VisionDemoAssets(ModelDataAssets):
    @property
    def messages(self) -> Path:
        """Chat messages whose content is a list of image/text parts, plus an `images` column."""
        return self.data_dir / "messages.jsonl"

    @property
    def sharegpt(self) -> Path:
        """LLaVA-style conversations with `<image>` in the text and an `image` column."""
        return self.data_dir / "llava.json"

    @property
    def captions(self) -> Path:
        """A caption table: `image` and `text` columns."""
        return self.data_dir / "captions.jsonl"

    @property
    def captions_csv(self) -> Path:
        """A caption table with its own column names (file_name, caption): needs column_mapping."""
        return self.data_dir / "captions.csv"


def caption_of(colour: str, shape: str) -> str:
    return f"A {colour} {shape}."


def draw_shape(colour: str, shape: str, rng: random.Random, side: int = IMAGE_SIDE):
    """A coloured shape at a random place and size on a light background."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (side, side), (245, 245, 245))
    draw = ImageDraw.Draw(image)
    size = rng.randint(side * 15 // 32, side * 25 // 32)
    x, y = rng.randint(2, side - size - 2), rng.randint(2, side - size - 2)
    fill = SHAPE_COLOURS[colour]
    if shape == "circle":
        draw.ellipse((x, y, x + size, y + size), fill=fill)
    elif shape == "square":
        draw.rectangle((x, y, x + size, y + size), fill=fill)
    else:
        draw.polygon([(x + size // 2, y), (x, y + size), (x + size, y + size)], fill=fill)
    return image


def _write_datasets(data_dir: Path) -> list[str]:
    """The images and the four data files; returns the corpus the tokenizer learns from."""
    (data_dir / "images").mkdir(parents=True, exist_ok=True)
    rng = random.Random(11)
    items = []
    for i in range(N_IMAGES):
        colour, shape = rng.choice(list(SHAPE_COLOURS)), rng.choice(SHAPES)
        name = f"images/{i:03d}.png"
        draw_shape(colour, shape, rng).save(data_dir / name)
        items.append((name, caption_of(colour, shape), QUESTIONS[i % len(QUESTIONS)]))
    with open(data_dir / "messages.jsonl", "w") as f:
        for name, caption, question in items:
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]},
                        {"role": "assistant", "content": [{"type": "text", "text": caption}]}]
            f.write(json.dumps({"messages": messages, "images": [name]}) + "\n")
    llava = [{"id": str(i), "image": name,
              "conversations": [{"from": "human", "value": f"<image>\n{question}"}, {"from": "gpt", "value": caption}]}
             for i, (name, caption, question) in enumerate(items)]
    (data_dir / "llava.json").write_text(json.dumps(llava, indent=1))
    with open(data_dir / "captions.jsonl", "w") as f:
        for name, caption, _ in items:
            f.write(json.dumps({"image": name, "text": caption}) + "\n")
    with open(data_dir / "captions.csv", "w") as f:
        f.write("file_name,caption\n")
        for name, caption, _ in items:
            f.write(f"{name},{caption}\n")
    return [caption for _, caption, _ in items] + list(QUESTIONS) * 4


def _build_model(model_dir: Path, corpus: list[str]) -> None:
    import torch
    from transformers import CLIPImageProcessorPil, CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor
    from transformers.utils import logging as hf_logging

    from tunelab.demos.assets import train_demo_tokenizer

    hf_logging.disable_progress_bar()
    tokenizer = train_demo_tokenizer(corpus, extra_special_tokens=(IMAGE_TOKEN,), vocab_size=400)
    tokenizer.chat_template = VISION_CHAT_TEMPLATE  # text-only rows on this model render the same way
    # 32-pixel images in 8-pixel patches: 16 image tokens per image (the CLS feature is dropped).
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              image_size=32, patch_size=8, projection_dim=32)
    text = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
                         vision_feature_layer=-1, vision_feature_select_strategy="default", image_seq_length=16,
                         tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config)
    image_processor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tokenizer, patch_size=8,
                               vision_feature_select_strategy="default", chat_template=VISION_CHAT_TEMPLATE,
                               image_token=IMAGE_TOKEN, num_additional_image_tokens=1)
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)


def _build(folder: Path) -> None:
    corpus = _write_datasets(folder / "data")
    _build_model(folder / "model", corpus)


def build_vision_demo_assets(target: Path) -> VisionDemoAssets:
    """Build the model and data into `target` atomically (temp folder, then rename)."""
    return VisionDemoAssets(build_atomically(target, VISION_DEMO_VERSION, _build))


def ensure_vision_demo_assets(root: Path | None = None) -> VisionDemoAssets:
    """The vision demo assets, built on first use (cached under the home unless `root` is given)."""
    return VisionDemoAssets(ensure_built(root, VISION_DEMO_VERSION, _build))


def vision_demo_config(assets: VisionDemoAssets, *, steps: int = 60, data: Path | None = None, **overrides):
    """A LoRA run on the shapes data with the loss on the captions only, so what falls is
    what the model learns from the pixels (colour and shape)."""
    return chat_demo_config(assets, data or assets.messages, steps=steps, display_name="demo (vision)", **overrides)


def demo_run_config(steps: int, backend: str, method: str):
    """`tunelab demo --modality vision` (the vision spec's `demo_builder`)."""
    return vision_demo_config(ensure_vision_demo_assets(), steps=steps)
