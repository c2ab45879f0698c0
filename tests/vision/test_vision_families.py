"""Every image-text-to-text family transformers can build here goes through tunelab's real
path: detected as vision from its config, loaded with its processor, its caption and
chat-parts rows prepared (no image token ever takes loss; with train_on_completions only
the assistant's text does), batched, trained one LoRA step, and its layers split into
vision and language parts by the finetune_* switches; a text-only dataset trains it as a
language model. Without torchvision (this CPU torch) the Qwen processors load without
their video part, and a processor that cannot exist at all is a model_name error.

The models are tiny random-init ones built offline (`tiny_families`), one per family.
Left out: Mistral 3 — its PixtralProcessor refuses to exist without torchvision, which
the CPU torch here lacks; SmolVLM — its processor needs the `num2words` package, not
installed (Idefics3 stands for that architecture).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

import tiny_families
from typed_config import typed
from tunelab.worker import lora_targets
from tunelab.worker.families import registry as model_family
from tunelab.worker.families.vision import model as vision_model
from tunelab.worker.context import RunSettingError
from tunelab.worker.model_setup import DeviceSettings
from tunelab.worker.data.sources import load_raw
from tunelab.worker.families.vision.collator import IGNORE_INDEX
from tunelab.worker.families.vision.data import image_token_ids

CPU = DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)
ROWS = 4
# Where each family keeps its vision tower and projector (everything else but the output
# head is the language model): the truth the switches are checked against, written down
# independently of how `lora_targets` finds the parts.
VISION_PARTS = {
    "qwen2_vl": ("model.visual.",),
    "qwen2_5_vl": ("model.visual.",),
    "qwen3_vl": ("model.visual.",),
    "gemma3": ("model.vision_tower.", "model.multi_modal_projector."),
    "mllama": ("model.vision_model.", "model.multi_modal_projector"),
    "llava_next": ("model.vision_tower.", "model.multi_modal_projector."),
    "idefics3": ("model.vision_model.", "model.connector."),
}
# The tokens that stand for an image in each family's rendered text and processed ids
# (placeholders, the copies the processor expands them into, and the markers around them).
QWEN_IMAGE = {"<|vision_start|>", "<|image_pad|>", "<|vision_end|>"}
IMAGE_TOKENS = {
    "qwen2_vl": QWEN_IMAGE, "qwen2_5_vl": QWEN_IMAGE, "qwen3_vl": QWEN_IMAGE,
    "gemma3": {"<start_of_image>", "<image_soft_token>", "<end_of_image>"},
    "mllama": {"<|image|>"},
    "llava_next": {"<image>"},
    "idefics3": {"<image>", "<fake_token_around_image>", "<global-img>"},
}
assert set(VISION_PARTS) == set(IMAGE_TOKENS) == set(tiny_families.FAMILIES)


@pytest.fixture(scope="module")
def small_data(vision_assets, tmp_path_factory) -> dict[str, Path]:
    """The first rows of the demo's caption table and chat-parts data, images by absolute path."""
    folder = tmp_path_factory.mktemp("family-data")
    images = vision_assets.data_dir
    files = {}
    for name, source in (("captions", vision_assets.captions), ("messages", vision_assets.messages)):
        rows = [json.loads(line) for line in source.read_text().splitlines()[:ROWS]]
        for row in rows:
            if "image" in row:
                row["image"] = str(images / row["image"])
            else:
                row["images"] = [str(images / path) for path in row["images"]]
        files[name] = folder / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(row) + "\n" for row in rows))
    return files


@pytest.fixture(scope="module", params=sorted(tiny_families.FAMILIES))
def family_model(request, vision_assets, tmp_path_factory) -> tuple[str, str]:
    """(family, model folder): the family's tiny model and processor, saved like a hub checkpoint."""
    corpus = [json.loads(line)["text"] for line in vision_assets.captions.read_text().splitlines()]
    corpus += ["What is in the picture?", "Describe the image."] * 4
    folder = tiny_families.build(request.param, tmp_path_factory.mktemp(request.param) / "model", corpus)
    return request.param, str(folder)


@pytest.fixture(scope="module")
def loaded(family_model):
    name, folder = family_model
    config = typed({"model_name": folder, "training_type": "lora", "lora_r": 4})
    family = model_family.detect(config)
    assert isinstance(family, model_family.TRAINING["vision"]), f"{name} was not detected as a vision-language model"
    return family, family.load(config, CPU)


def _config(folder: str, data: Path, **extra):
    return typed({"model_name": folder, "training_type": "lora", "lora_r": 4, "max_seq_length": 256, "batch_size": 2,
            "local_datasets": [str(data)], **extra})


def _batch(family, loaded, config, tmp_path):
    prepared = family.prepare(typed(config), loaded, load_raw(typed(config), tmp_path / "cache"))
    assert len(prepared.train) == ROWS
    return prepared, prepared.collator([prepared.train[0], prepared.train[1]])


def test_loads_as_a_vision_model_with_its_processor(family_model, loaded):
    _, loaded_model = loaded
    assert loaded_model.processing.tokenizer is loaded_model.tokenizer
    assert getattr(loaded_model.processing, "image_processor", None) is not None
    assert image_token_ids(loaded_model.processing), "the processor names no image token"
    assert type(loaded_model.model).__name__.endswith("ForConditionalGeneration")
    # A data loader's workers and datasets' fingerprinting pickle the processor.
    copy = pickle.loads(pickle.dumps(loaded_model.processing))
    assert type(copy) is type(loaded_model.processing)
    assert copy(text=["a <|end|>"], return_tensors="pt")["input_ids"].tolist() == \
        loaded_model.processing(text=["a <|end|>"], return_tensors="pt")["input_ids"].tolist()


@pytest.mark.parametrize("data, completions", [("captions", True), ("messages", True), ("messages", False)])
def test_labels_cover_the_text_and_never_an_image_token(family_model, loaded, small_data, tmp_path, data, completions):
    family, loaded_model = loaded
    tokenizer = loaded_model.tokenizer
    config = _config(family_model[1], small_data[data], train_on_completions=completions)
    prepared, batch = _batch(family, loaded_model, config, tmp_path)
    image_ids = set(tokenizer.convert_tokens_to_ids(sorted(IMAGE_TOKENS[family_model[0]])))
    assert image_ids <= image_token_ids(loaded_model.processing)  # tunelab knows every one of them
    rows = [json.loads(line) for line in small_data[data].read_text().splitlines()]
    for i in range(2):
        ids, labels = batch["input_ids"][i], batch["labels"][i]
        trained = labels != IGNORE_INDEX
        assert bool((labels[trained] == ids[trained]).all())
        assert not set(ids[trained].tolist()) & image_ids  # no image token or marker takes loss
        assert image_ids & set(ids.tolist())  # ...and the row does hold image tokens
        if completions:
            reply = rows[i]["text"] if data == "captions" else rows[i]["messages"][-1]["content"][0]["text"]
            assert tokenizer.decode(ids[trained].tolist()) == reply + "<|end|>"  # exactly the assistant's turn
        else:
            # Every text token of the rendered conversation takes loss, nothing the processor inserted.
            text_tokens = [t for t in prepared.train[i]["text_ids"] if t not in image_ids]
            assert ids[trained].tolist() == text_tokens


def test_one_lora_step_changes_the_adapter(family_model, loaded, small_data, tmp_path):
    import torch

    family, loaded_model = loaded
    config = _config(family_model[1], small_data["captions"], train_on_completions=True)
    _, batch = _batch(family, loaded_model, config, tmp_path)
    model = family.wrap(loaded_model.model, config, CPU)
    try:
        adapters = {n: p for n, p in model.named_parameters() if p.requires_grad}
        assert adapters and all(".lora_" in n for n in adapters)
        before = {n: p.detach().clone() for n, p in adapters.items()}
        optimizer = torch.optim.AdamW(adapters.values(), lr=1e-2)
        loss = model(**batch).loss
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        changed = {n for n, p in adapters.items() if not torch.equal(p, before[n])}
        vision = VISION_PARTS[family_model[0]]
        assert any(n.removeprefix("base_model.model.").startswith(vision) for n in changed), "the loss never reached the vision tower"
        assert any(not n.removeprefix("base_model.model.").startswith(vision) for n in changed)
    finally:
        model.unload()  # the module-scoped model goes back to its plain layers for the next test


def test_the_switches_split_vision_from_language(family_model, loaded):
    name, _ = family_model
    model = loaded[1].model
    everything = set(lora_targets.classify_linear_layers(model))
    vision = {n for n in everything if n.startswith(VISION_PARTS[name])}
    assert vision and everything - vision
    assert lora_targets.select_targets(model, typed({"finetune_vision_layers": False})) == sorted(everything - vision)
    assert lora_targets.select_targets(model, typed({"finetune_language_layers": False})) == sorted(vision)
    assert not any("lm_head" in n for n in everything)


@pytest.mark.skipif(vision_model.torchvision_installed(), reason="the refusal is for a machine without torchvision")
def test_a_processor_that_needs_a_missing_package_is_a_setting_to_fix(tmp_path):
    """Mistral 3's PixtralProcessor cannot exist without torchvision: loading its model says
    so, naming the field and the fix, instead of an ImportError from inside transformers."""
    from transformers import Mistral3Config

    from tunelab.demos.assets import train_demo_tokenizer

    Mistral3Config().save_pretrained(tmp_path)  # the config alone: the processor fails before any weight is read
    train_demo_tokenizer(["a red circle"], extra_special_tokens=("[IMG]",), vocab_size=300).save_pretrained(tmp_path)
    (tmp_path / "processor_config.json").write_text(json.dumps(
        {"processor_class": "PixtralProcessor", "image_processor": {"image_processor_type": "PixtralImageProcessor"}}))
    config = typed({"model_name": str(tmp_path)})
    assert model_family.family_spec(config).name == "vision"
    with pytest.raises(RunSettingError) as refused:
        vision_model.load_processor(config)
    assert refused.value.field == "model_name"
    assert "torchvision" in refused.value.message.lower() and "install" in refused.value.message


def test_a_text_only_dataset_trains_it_as_a_language_model(family_model, loaded, tmp_path):
    import torch
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    family, loaded_model = loaded
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Name colour {i}."},
                                                     {"role": "assistant", "content": "A red circle."}]}) + "\n" for i in range(ROWS)))
    config = _config(family_model[1], data, train_on_completions=True)
    prepared = family.prepare(typed(config), loaded_model, load_raw(typed(config), tmp_path / "cache"))
    assert prepared.collator is None  # the text path's own collator, as for a text model
    rows = [{"input_ids": row["input_ids"], "labels": row["labels"]} for row in prepared.train.select(range(2))]
    batch = DataCollatorForLanguageModeling(pad_token_id=loaded_model.tokenizer.pad_token_id)(rows)
    model = loaded_model.model.train()
    loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
    assert torch.isfinite(loss)
    trained = batch["labels"][0] != IGNORE_INDEX
    assert loaded_model.tokenizer.decode(batch["input_ids"][0][trained].tolist()) == "A red circle.<|end|>"
