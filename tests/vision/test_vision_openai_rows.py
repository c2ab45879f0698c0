"""OpenAI-format image rows (`image_url` parts with `data:` URIs, no images column) are
image rows: the vision family trains on them as such and their pixels reach the collator;
an image part that cannot be resolved, or a URL a served run may not fetch, is an error
naming the row and the part; a text-only model given image parts refuses them the same way."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from openai_rows import data_uri, openai_row, openai_rows, write_jsonl

from typed_config import typed
from tunelab import paths
from tunelab.worker.data import prepare as text_data
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.families.vision.family import VisionFamily
from tunelab.worker.data.sources import load_raw
from tunelab.worker.families.vision.data import has_images, prepare

IMAGE_TOKENS_PER_IMAGE = 16  # the demo tower: 32-pixel images in 8-pixel patches


def _config(data: Path, tmp_path: Path, **extra):
    return typed({"model_name": "unused", "local_datasets": [str(data)], "max_seq_length": 128, "batch_size": 2,
            "vision_image_size": 512, "output_dir": str(tmp_path / "out"), **extra})


def _raw(data: Path, tmp_path: Path, **extra):
    config = _config(data, tmp_path, **extra)
    return config, load_raw(typed(config), tmp_path / "cache")


@pytest.mark.parametrize("answer_as_text", [False, True], ids=["reply as parts", "reply as a string"])
def test_data_uri_rows_are_image_rows_and_their_pixels_reach_the_collator(vision_assets, processor, tmp_path, answer_as_text):
    data = write_jsonl(tmp_path / "openai.jsonl", openai_rows(vision_assets, 4, answer_as_text))
    config, raw = _raw(data, tmp_path)
    assert raw.format == "chatml" and has_images(raw) and VisionFamily().modality(raw) == "vision"
    prepared = prepare(typed(config), processor, raw)
    assert len(prepared.train) == 4
    row = prepared.train[0]
    assert len(row["images"]) == 1 and row["images"][0]["bytes"] and row["images"][0]["path"] is None
    assert row["text"].count("<image>") == 1 and row["text"].index("What is shown?") < row["text"].index("<image>")
    assert row["text"].endswith("A red circle.<|end|>\n")
    batch = prepared.collator([prepared.train[0], prepared.train[1]])
    assert batch["pixel_values"].shape[0] == 2
    assert int((batch["input_ids"] == processor.image_token_id).sum()) == 2 * IMAGE_TOKENS_PER_IMAGE


def test_every_form_of_reference_in_a_part_trains_alike(vision_assets, processor, tmp_path):
    """A relative path, a file: URL and a data: URI of the same image give the same pixels."""
    image = vision_assets.data_dir / "images" / "003.png"
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "x.png").write_bytes(image.read_bytes())
    rows = [openai_row("pics/x.png"), openai_row((tmp_path / "pics" / "x.png").as_uri()), openai_row(data_uri(image))]
    config, raw = _raw(write_jsonl(tmp_path / "forms.jsonl", rows), tmp_path)
    prepared = prepare(typed(config), processor, raw)
    batch = prepared.collator([prepared.train[i] for i in range(3)])
    pixels = batch["pixel_values"]
    assert pixels.shape[0] == 3 and bool((pixels[0] == pixels[1]).all()) and bool((pixels[0] == pixels[2]).all())


def test_an_image_part_without_an_image_names_the_row_and_the_part(vision_assets, processor, tmp_path):
    rows = openai_rows(vision_assets, 3)
    rows[2]["messages"][0]["content"][1] = {"type": "image_url", "image_url": {"url": ""}}
    config, raw = _raw(write_jsonl(tmp_path / "empty.jsonl", rows), tmp_path)
    assert has_images(raw)
    with pytest.raises(DataFormatError) as refused:
        prepare(typed(config), processor, raw)
    assert refused.value.message.startswith("row 2 of the training data: messages[0].content[1] (image_url part) holds no image")


def test_an_unreadable_data_uri_names_the_row_and_the_part(vision_assets, processor, tmp_path):
    rows = openai_rows(vision_assets, 3)
    rows[1]["messages"][0]["content"][1]["image_url"]["url"] = "data:image/png;base64," + base64.b64encode(b"not a picture").decode()
    config, raw = _raw(write_jsonl(tmp_path / "bad.jsonl", rows), tmp_path)
    with pytest.raises(DataFormatError) as refused:
        prepare(typed(config), processor, raw)
    message = refused.value.message
    assert refused.value.field == "local_datasets"
    assert message.startswith("row 1 of the training data: image data:image/png;base64,… (")
    assert "in messages[0].content[1] (image_url part) cannot be read" in message and str(tmp_path) not in message


def test_a_served_run_refuses_an_image_url_without_the_opt_in(vision_assets, processor, tmp_path, monkeypatch):
    """A refusal even with skip_bad_images: the server would fetch an address a client chose."""
    rows = openai_rows(vision_assets, 3)
    rows[1] = openai_row("http://127.0.0.1:9/cat.png")
    monkeypatch.setenv(paths.CONFINE_READS_ENV, "1")
    monkeypatch.delenv(paths.IMAGE_URLS_ENV, raising=False)
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(tmp_path))
    config, raw = _raw(write_jsonl(tmp_path / "urls.jsonl", rows), tmp_path, skip_bad_images=True)
    with pytest.raises(DataFormatError) as refused:
        prepare(typed(config), processor, raw)
    message = refused.value.message
    assert message.startswith("row 1 of the training data: image in messages[0].content[1] (image_url part): ")
    assert "http://127.0.0.1:9/cat.png" in message and "tunelab serve --allow-image-urls" in message


def test_a_text_only_model_given_image_parts_names_the_row_and_the_part(vision_assets, demo_assets, tmp_path):
    from transformers import AutoTokenizer

    rows = [{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]}]}] * 3
    rows = rows + openai_rows(vision_assets, 1)
    config, raw = _raw(write_jsonl(tmp_path / "mixed.jsonl", rows), tmp_path, model_name="tiny-llama")
    with pytest.raises(DataFormatError) as refused:
        text_data.prepare(typed(config), AutoTokenizer.from_pretrained(demo_assets.model_dir), raw)
    assert refused.value.field == "model_name"
    assert refused.value.message.startswith("row 3 of the training data has an image in messages[0].content[1] (image_url part), "
                                            "and tiny-llama is a text-only model")


def test_placeholders_without_an_images_column_are_refused_not_trained_as_text(vision_assets, tmp_path):
    """LLaVA-style rows whose images sit in a column tunelab does not know (`image_path`):
    a vision model would otherwise train on the `<image>` text without its images."""
    from tunelab.worker.families.vision.data import refuse_placeholders_without_images

    rows = [{"conversations": [{"from": "human", "value": "Which shape?"}, {"from": "gpt", "value": "A circle."}], "image_path": "a.png"},
            {"conversations": [{"from": "human", "value": "<image>\nWhich shape?"}, {"from": "gpt", "value": "A square."}], "image_path": "b.png"}]
    _, raw = _raw(write_jsonl(tmp_path / "llava.jsonl", rows), tmp_path)
    assert not has_images(raw)
    with pytest.raises(DataFormatError) as refused:
        refuse_placeholders_without_images(raw)
    assert refused.value.field == "column_mapping"
    assert refused.value.message.startswith("row 1 of the training data has an <image> placeholder in conversations[0].value "
                                            "but the data has no images column")
    assert "column_mapping: {images: your_column}" in refused.value.message
