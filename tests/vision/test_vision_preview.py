"""The dataset check on image data: the detected format, the image count, and the shown
rows rendered through the processor's chat template with each image's size and thumbnail;
an image outside the folders tunelab may read is refused, never opened."""

from __future__ import annotations

import json

from typed_config import typed
from tunelab.worker.preview.child import build_preview


def test_image_data_previews_with_counts_sizes_and_thumbnails(vision_assets, home, tmp_path, monkeypatch):
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(vision_assets.root))
    config = {"local_datasets": [str(vision_assets.sharegpt)], "format": "auto"}
    preview = build_preview(typed(config), 2, str(vision_assets.model_dir), tmp_path / "cache")
    assert preview["format"] == "sharegpt" and preview["image_count"] == 96 and preview["row_count"] == 96
    assert preview["rendered_with"] == "chat_template"
    first = preview["rows"][0]
    assert first["text"].startswith("<|user|>\n<image>") and first["messages"][0]["content"].startswith("<image>")
    image = first["images"][0]
    assert (image["width"], image["height"]) == (64, 64) and image["thumbnail"].startswith("data:image/jpeg;base64,")


def test_an_image_outside_the_data_roots_is_refused_not_opened(vision_assets, home, tmp_path, monkeypatch):
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    data = tmp_path / "data" / "captions.jsonl"
    outside = str(vision_assets.data_dir / "images" / "000.png")  # a real image, but not in a data root
    data.write_text(json.dumps({"image": outside, "text": "A shape."}) + "\n")
    preview = build_preview(typed({"local_datasets": [str(data)]}), 1, None, tmp_path / "cache")
    assert preview["format"] == "caption" and preview["image_count"] == 1 and preview["rendered_with"] == "plain"
    image = preview["rows"][0]["images"][0]
    assert "thumbnail" not in image and "outside the folders tunelab may read" in image["error"]


def test_the_preview_counts_the_rows_training_would_not_take(vision_assets, home, tmp_path, monkeypatch):
    """Missing, not an image, and outside the readable folders: three bad rows of five."""
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "good.png").write_bytes((vision_assets.data_dir / "images" / "000.png").read_bytes())
    (tmp_path / "data" / "notes.png").write_text("not a picture")
    outside = str(vision_assets.data_dir / "images" / "001.png")
    data = tmp_path / "data" / "captions.jsonl"
    data.write_text("".join(json.dumps({"image": name, "text": "A shape."}) + "\n"
                            for name in ("good.png", "gone.png", "notes.png", outside, "good.png")))
    preview = build_preview(typed({"local_datasets": [str(data)]}), 1, None, tmp_path / "cache")
    assert (preview["bad_image_rows"], preview["image_rows_checked"], preview["row_count"]) == (3, 5, 5)
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(vision_assets.root))
    clean = build_preview(typed({"local_datasets": [str(vision_assets.captions)]}), 1, None, tmp_path / "cache2")
    assert (clean["bad_image_rows"], clean["image_rows_checked"]) == (0, 96)


def test_openai_image_parts_preview_as_image_rows(vision_assets, home, tmp_path, monkeypatch):
    """data: URIs show as thumbnails (named by their media type, not their text); a URL the
    server may not fetch is shown with the refusal training would give, and never fetched."""
    from openai_rows import openai_row, openai_rows, write_jsonl

    from tunelab import paths

    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(tmp_path))
    monkeypatch.setenv(paths.CONFINE_READS_ENV, "1")
    monkeypatch.delenv(paths.IMAGE_URLS_ENV, raising=False)
    rows = openai_rows(vision_assets, 3) + [openai_row("http://127.0.0.1:9/cat.png")]
    data = write_jsonl(tmp_path / "openai.jsonl", rows)
    preview = build_preview(typed({"local_datasets": [str(data)]}), 4, str(vision_assets.model_dir), tmp_path / "cache")
    assert preview["format"] == "chatml" and preview["image_count"] == 4 and preview["row_count"] == 4
    assert (preview["bad_image_rows"], preview["image_rows_checked"]) == (0, 4)
    first = preview["rows"][0]
    assert "<image>" in first["text"] and "What is shown?" in first["messages"][0]["content"]
    image = first["images"][0]
    assert image["name"].startswith("data:image/png;base64,… (") and image["thumbnail"].startswith("data:image/jpeg;base64,")
    refused = preview["rows"][3]["images"][0]
    assert refused["name"] == "http://127.0.0.1:9/cat.png" and "--allow-image-urls" in refused["error"]
