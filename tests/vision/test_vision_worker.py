"""The real worker in a spawn child on the tiny vision-language model: each image data
shape is detected and trains (OpenAI `image_url` parts with data: URIs as a vision run),
text-only data trains it as a language model, a missing image ends the run before
training with an error naming the row, the path and the field (or, with skip_bad_images,
is skipped and reported), an image part that holds no image ends it naming the row and
the part, and full fine-tuning with the vision switch off saves a model whose vision
tower is the base's."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from openai_rows import openai_rows, write_jsonl
from spawned_worker import demo_config, run_to_end

from tunelab import events as ev

pytestmark = pytest.mark.slow


def _payload(assets, data, out, **overrides):
    """The worker tests' short-run payload, on the vision model and `data`."""
    return demo_config(SimpleNamespace(model_dir=assets.model_dir, alpaca=data), out, **overrides)


def _embedded_parquet(assets, folder: Path) -> Path:
    """The hub's shape: an image feature holding each file's bytes, under a bare file name
    that exists nowhere on disk."""
    import datasets

    files = sorted((assets.data_dir / "images").glob("*.png"))[:8]
    table = datasets.Dataset.from_dict({"image": [{"bytes": f.read_bytes(), "path": f.name} for f in files],
                                        "text": [f"Shape {i}." for i in range(len(files))]})
    table.cast_column("image", datasets.Image()).to_parquet(folder / "embedded.parquet")
    return folder / "embedded.parquet"


# (the data, its column_mapping, the format auto-detection must name, its rows)
SHAPES = {
    "chat messages with image parts": (lambda a, _: a.messages, {}, "chatml", 96),
    "LLaVA conversations with <image>": (lambda a, _: a.sharegpt, {}, "sharegpt", 96),
    "parquet with embedded image bytes": (_embedded_parquet, {}, "caption", 8),
    "caption table with column_mapping": (lambda a, _: a.captions_csv, {"image": "file_name", "text": "caption"}, "caption", 96),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_image_data_shape_is_detected_and_trains(vision_assets, tmp_path, shape):
    data_of, mapping, expected, rows = SHAPES[shape]
    payload = _payload(vision_assets, data_of(vision_assets, tmp_path), tmp_path / "out", max_steps=2, column_mapping=mapping)
    final, worker = run_to_end(payload)
    assert final["type"] == ev.COMPLETE, final
    assert f"Tokenizing {rows} {expected} rows" in [e["message"] for e in worker.events if e["type"] == ev.STATUS]
    assert [p["step"] for p in worker.progress()] == [1, 2]


def test_openai_rows_with_data_uris_train_as_a_vision_run(vision_assets, tmp_path):
    data = write_jsonl(tmp_path / "openai.jsonl", openai_rows(vision_assets, 8))
    final, worker = run_to_end(_payload(vision_assets, data, tmp_path / "out", max_steps=2))
    assert final["type"] == ev.COMPLETE, final
    assert [e["modality"] for e in worker.events if e["type"] == ev.MODALITY] == ["vision"]
    assert "Tokenizing 8 chatml rows" in [e["message"] for e in worker.events if e["type"] == ev.STATUS]
    assert [p["step"] for p in worker.progress()] == [1, 2]


def test_an_image_part_that_holds_no_image_ends_the_run_naming_the_row(vision_assets, tmp_path):
    rows = openai_rows(vision_assets, 6)
    rows[4]["messages"][0]["content"][1] = {"type": "image_url", "image_url": {}}
    final, worker = run_to_end(_payload(vision_assets, write_jsonl(tmp_path / "openai.jsonl", rows), tmp_path / "out"))
    assert final["type"] == ev.ERROR
    assert final["error"].startswith("format: row 4 of the training data: messages[0].content[1] (image_url part) holds no image")
    assert not worker.progress()


def test_text_only_data_trains_a_vision_model_as_a_language_model(vision_assets, tmp_path):
    data = tmp_path / "text.jsonl"
    data.write_text("".join(json.dumps({"instruction": "Name a shape.", "output": f"A {shape}."}) + "\n"
                            for shape in ("circle", "square", "triangle") * 4))
    out = tmp_path / "out"
    final, worker = run_to_end(_payload(vision_assets, data, out, max_steps=3))
    assert final["type"] == ev.COMPLETE, final
    assert "Tokenizing 12 alpaca rows" in [e["message"] for e in worker.events if e["type"] == ev.STATUS]
    assert [e["modality"] for e in worker.events if e["type"] == ev.MODALITY] == ["text"]
    assert [p["step"] for p in worker.progress()] == [1, 2, 3]
    # Saved with its processor, so the result reloads with AutoProcessor.
    assert (out / "adapter_model.safetensors").is_file() and (out / "processor_config.json").is_file()


def test_a_missing_image_ends_the_run_before_training(vision_assets, tmp_path):
    data = tmp_path / "captions.jsonl"
    image = str((vision_assets.data_dir / "images" / "001.png").resolve())
    data.write_text("".join(json.dumps(row) + "\n" for row in [
        {"image": image, "text": "A shape."}, {"image": "lost/7.png", "text": "A shape."}, {"image": image, "text": "A shape."}]))
    final, worker = run_to_end(_payload(vision_assets, data, tmp_path / "out"))
    assert final["type"] == ev.ERROR
    assert final["error"].startswith("local_datasets: row 1 of the training data: image ")
    assert str(tmp_path / "lost" / "7.png") in final["error"]
    assert "training" not in [e.get("stage") for e in worker.events if e["type"] == ev.STATUS]


def test_skip_bad_images_trains_on_the_good_rows_and_reports_the_bad_ones(vision_assets, tmp_path):
    data = tmp_path / "captions.jsonl"
    (tmp_path / "notes.png").write_text("not a picture")
    image = str((vision_assets.data_dir / "images" / "001.png").resolve())
    rows = [{"image": image, "text": "A shape."}] * 6
    rows[1], rows[4] = {"image": "lost/7.png", "text": "A shape."}, {"image": "notes.png", "text": "A shape."}
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    final, worker = run_to_end(_payload(vision_assets, data, tmp_path / "out", max_steps=2, skip_bad_images=True))
    assert final["type"] == ev.COMPLETE, final
    statuses = [e.get("message") for e in worker.events if e["type"] == ev.STATUS]
    note = next(m for m in statuses if m.startswith("Skipped 2 of 6 training rows"))
    assert f"row 1 ({tmp_path / 'lost' / '7.png'})" in note and f"row 4 ({tmp_path / 'notes.png'})" in note
    assert statuses.index(note) < statuses.index("Training")  # reported before training starts
    assert [p["step"] for p in worker.progress()] == [1, 2]


def test_full_fine_tuning_with_the_vision_switch_off_keeps_the_base_vision_tower(vision_assets, tmp_path):
    """training_type=full, finetune_vision_layers=false: the saved folder loads with
    AutoProcessor + AutoModelForImageTextToText, its vision tower and projector are the
    base's to the bit, and the language model's weights moved."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = tmp_path / "out"
    final, worker = run_to_end(_payload(vision_assets, vision_assets.messages, out, training_type="full", max_steps=3,
                                        finetune_vision_layers=False))
    assert final["type"] == ev.COMPLETE, final
    assert [p["step"] for p in worker.progress()] == [1, 2, 3]
    assert AutoProcessor.from_pretrained(out).image_token == AutoProcessor.from_pretrained(vision_assets.model_dir).image_token
    trained = AutoModelForImageTextToText.from_pretrained(out, dtype=torch.float32).state_dict()
    base = AutoModelForImageTextToText.from_pretrained(vision_assets.model_dir, dtype=torch.float32).state_dict()
    assert trained.keys() == base.keys()
    vision = [n for n in base if n.startswith(("model.vision_tower.", "model.multi_modal_projector."))]
    language = [n for n in base if n.startswith("model.language_model.") or n.startswith("lm_head.")]
    assert vision and language and len(vision) + len(language) == len(base)
    assert all(torch.equal(trained[n], base[n]) for n in vision)
    changed = [n for n in language if not torch.equal(trained[n], base[n])]
    assert any(".layers." in n for n in changed) and "lm_head.weight" in changed
