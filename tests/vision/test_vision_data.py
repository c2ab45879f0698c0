"""Image-text data: each published shape is detected and read, labels cover exactly the
assistant's text, images are bounded and decoded per batch, and a bad image is an error
naming its row and path before any training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from typed_config import typed
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.data.sources import load_raw
from tunelab.worker.families.vision.collator import IGNORE_INDEX, open_image
from tunelab.worker.families.vision.data import prepare

IMAGE_TOKENS_PER_IMAGE = 16  # the demo tower: 32-pixel images in 8-pixel patches


def _config(data: Path, **extra):
    return typed({"model_name": "unused", "local_datasets": [str(data)], "max_seq_length": 128, "batch_size": 2,
            "vision_image_size": 512, **extra})


def _prepared(data: Path, processor, tmp_path: Path, **extra):
    config = _config(data, **extra)
    return prepare(typed(config), processor, load_raw(typed(config), tmp_path / "cache"))


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("data, mapping, expected", [
    ("messages", None, "chatml"),
    ("sharegpt", None, "sharegpt"),
    ("captions", None, "caption"),
    ("captions_csv", {"image": "file_name", "text": "caption"}, "caption"),
])
def test_each_shape_is_detected_and_read(vision_assets, processor, tmp_path, data, mapping, expected):
    prepared = _prepared(getattr(vision_assets, data), processor, tmp_path, column_mapping=mapping or {})
    assert prepared.format == expected
    assert len(prepared.train) == 96
    row = prepared.train[0]
    assert len(row["images"]) == 1 and Path(row["images"][0]["path"]).is_file()  # relative path resolved
    assert row["text"].count("<image>") == 1
    batch = prepared.collator([prepared.train[0], prepared.train[1]])
    assert batch["pixel_values"].shape[0] == 2
    assert int((batch["input_ids"] == processor.image_token_id).sum()) == 2 * IMAGE_TOKENS_PER_IMAGE


def test_an_unknown_image_shape_lists_the_columns_and_a_working_example(vision_assets, tmp_path):
    data = _write_jsonl(tmp_path / "odd.jsonl", [{"image": "images/000.png", "label": 3}])
    with pytest.raises(DataFormatError) as refused:
        load_raw(typed(_config(data)), tmp_path / "cache")
    assert refused.value.field == "format"
    assert "['image', 'label']" in refused.value.message and '"images": ["images/0.png"]' in refused.value.message


def _labelled_tokens(batch, row: int) -> list[int]:
    labels = batch["labels"][row].tolist()
    return [i for i, label in enumerate(labels) if label != IGNORE_INDEX]


def test_labels_cover_exactly_the_assistant_text(vision_assets, processor, tmp_path):
    """Two turns, an image in each user turn: with train_on_completions only the two replies
    (each with its end marker) are trained, never the image tokens or the prompts."""
    image = str((vision_assets.data_dir / "images" / "000.png").resolve())
    row = {"messages": [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A red circle."}]},
        {"role": "user", "content": [{"type": "text", "text": "And this one?"}, {"type": "image"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A blue square."}]},
    ], "images": [image, image]}
    data = _write_jsonl(tmp_path / "two.jsonl", [row, row])
    prepared = _prepared(data, processor, tmp_path, train_on_completions=True)
    batch = prepared.collator([prepared.train[0]])
    ids = batch["input_ids"][0].tolist()
    trained = _labelled_tokens(batch, 0)
    tokenizer = processor.tokenizer
    spans = []  # maximal runs of trained positions
    for position in trained:
        if spans and spans[-1][-1] == position - 1:
            spans[-1].append(position)
        else:
            spans.append([position])
    assert [tokenizer.decode([ids[p] for p in span]) for span in spans] == ["A red circle.<|end|>", "A blue square.<|end|>"]
    image_positions = [i for i, t in enumerate(ids) if t == processor.image_token_id]
    assert len(image_positions) == 2 * IMAGE_TOKENS_PER_IMAGE and not set(image_positions) & set(trained)
    assert all(batch["labels"][0][p] == ids[p] for p in trained)

    everything = _prepared(data, processor, tmp_path / "all")
    all_batch = everything.collator([everything.train[0]])
    untrained = [i for i, label in enumerate(all_batch["labels"][0].tolist()) if label == IGNORE_INDEX]
    assert untrained == image_positions  # without masking, every text token trains and no image token does


def test_a_missing_or_unreadable_image_names_its_row_and_path_before_training(vision_assets, processor, tmp_path):
    good = {"image": str((vision_assets.data_dir / "images" / "000.png").resolve()), "text": "A red circle."}
    data = _write_jsonl(tmp_path / "missing.jsonl", [good, good, {"image": "images/gone.png", "text": "A blue square."}])
    with pytest.raises(DataFormatError) as missing:
        _prepared(data, processor, tmp_path)
    assert missing.value.field == "local_datasets"
    assert "row 2 of the training data" in missing.value.message and str(tmp_path / "images" / "gone.png") in missing.value.message

    (tmp_path / "notes.png").write_text("not a picture")
    data = _write_jsonl(tmp_path / "broken.jsonl", [good, {"image": "notes.png", "text": "A blue square."}])
    with pytest.raises(DataFormatError, match=r"row 1 of the training data: image .*notes\.png in the 'image' column cannot be read"):
        _prepared(data, processor, tmp_path / "b")


def test_placeholders_and_images_must_pair_up(vision_assets, processor, tmp_path):
    image = str((vision_assets.data_dir / "images" / "000.png").resolve())
    row = {"conversations": [{"from": "human", "value": "<image><image> Which?"}, {"from": "gpt", "value": "A red circle."}],
           "images": [image]}
    data = _write_jsonl(tmp_path / "pairs.json", [row, row])
    with pytest.raises(DataFormatError, match=r"2 image placeholder\(s\) but 1 image"):
        _prepared(data, processor, tmp_path)


def test_images_are_shrunk_to_vision_image_size_keeping_their_shape(tmp_path):
    from PIL import Image

    Image.new("RGBA", (300, 150), (200, 10, 10, 255)).save(tmp_path / "wide.png")
    shrunk = open_image({"path": str(tmp_path / "wide.png"), "bytes": None}, 100)
    assert shrunk.size == (100, 50) and shrunk.mode == "RGB"
    assert open_image({"path": str(tmp_path / "wide.png"), "bytes": None}, 512).size == (300, 150)


def test_a_parquet_table_with_embedded_image_bytes_reads_without_decoding(vision_assets, processor, tmp_path):
    """The hub's shape: an image feature holding the file bytes inside the data file."""
    import datasets

    files = sorted((vision_assets.data_dir / "images").glob("*.png"))[:6]
    # Bytes with a bare file name, as hub datasets store them: no file exists at that path.
    images = [{"bytes": f.read_bytes(), "path": f.name} for f in files]
    table = datasets.Dataset.from_dict({"image": images, "text": ["A shape."] * len(files)})
    table.cast_column("image", datasets.Image()).to_parquet(tmp_path / "embedded.parquet")
    prepared = _prepared(tmp_path / "embedded.parquet", processor, tmp_path)
    assert prepared.format == "caption"
    refs = prepared.train[0]["images"]
    assert refs[0]["bytes"] == files[0].read_bytes()
    batch = prepared.collator([prepared.train[i] for i in range(3)])
    assert batch["pixel_values"].shape[0] == 3


def test_in_a_served_run_an_image_outside_the_data_roots_is_refused(vision_assets, processor, home, tmp_path, monkeypatch):
    """A server's workers inherit TUNELAB_CONFINE_READS: the images a data file names must
    lie in the data roots like the file itself; the CLI's own runs read them anywhere."""
    (tmp_path / "data").mkdir()
    data = _write_jsonl(tmp_path / "data" / "captions.jsonl", [
        {"image": str((vision_assets.data_dir / "images" / f"00{i}.png").resolve()), "text": "A shape."} for i in range(3)])
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(tmp_path / "data"))
    assert len(_prepared(data, processor, tmp_path / "cli").train) == 3
    monkeypatch.setenv("TUNELAB_CONFINE_READS", "1")
    with pytest.raises(DataFormatError) as refused:
        _prepared(data, processor, tmp_path / "served")
    assert refused.value.field == "local_datasets"
    assert refused.value.message.startswith("row 0 of the training data: image ") and "outside the folders tunelab may read" in refused.value.message


def test_instruction_rows_with_an_image_column_put_the_image_in_the_user_turn(vision_assets, processor, tmp_path):
    image = str((vision_assets.data_dir / "images" / "000.png").resolve())
    row = {"instruction": "Name the shape.", "output": "A red circle.", "image": image}
    prepared = _prepared(_write_jsonl(tmp_path / "alpaca.jsonl", [row, row]), processor, tmp_path)
    assert prepared.format == "alpaca"
    assert prepared.train[0]["text"] == "<|user|>\n<image>Name the shape.<|end|>\n<|assistant|>\nA red circle.<|end|>\n"


def _bad_and_good(vision_assets, tmp_path: Path, name: str, bad_rows: dict[int, str], count: int) -> Path:
    """`count` caption rows, the ones in `bad_rows` pointing at the given (bad) image path."""
    good = str((vision_assets.data_dir / "images" / "000.png").resolve())
    return _write_jsonl(tmp_path / name, [{"image": bad_rows.get(i, good), "text": "A red circle."} for i in range(count)])


def test_skip_bad_images_drops_counts_and_names_the_bad_rows_per_split(vision_assets, processor, tmp_path):
    """Missing, not-an-image and truncated files are skipped (a first row that is bad
    included); training and eval data are reported separately."""
    (tmp_path / "notes.png").write_text("not a picture")
    (tmp_path / "cut.png").write_bytes((vision_assets.data_dir / "images" / "001.png").read_bytes()[:20])
    train = _bad_and_good(vision_assets, tmp_path, "train.jsonl", {0: "gone.png", 3: "notes.png", 5: "cut.png"}, 8)
    held = _bad_and_good(vision_assets, tmp_path, "eval.jsonl", {1: "lost/1.png"}, 3)
    config = _config(train, skip_bad_images=True, local_eval_datasets=[str(held)], eval_steps=1)
    prepared = prepare(typed(config), processor, load_raw(typed(config), tmp_path / "cache"))
    assert len(prepared.train) == 5 and len(prepared.eval) == 2
    assert all(len(row["images"]) == 1 and row["text_ids"] for row in prepared.train)
    training, held_out = prepared.notes
    assert training.startswith("Skipped 3 of 8 training rows whose image is missing, unreadable or not an image (skip_bad_images): ")
    for index, name in ((0, "gone.png"), (3, "notes.png"), (5, "cut.png")):
        assert f"row {index} ({tmp_path / name})" in training
    assert held_out.startswith("Skipped 1 of 3 eval rows") and f"row 1 ({tmp_path / 'lost' / '1.png'})" in held_out
    batch = prepared.collator([prepared.train[0], prepared.train[1]])
    assert batch["pixel_values"].shape[0] == 2


def test_skipped_rows_beyond_the_first_few_are_counted_not_listed(vision_assets, processor, tmp_path):
    data = _bad_and_good(vision_assets, tmp_path, "many.jsonl", {i: f"gone/{i}.png" for i in range(7)}, 9)
    (note,) = _prepared(data, processor, tmp_path, skip_bad_images=True).notes
    assert note.startswith("Skipped 7 of 9 training rows") and note.endswith(f"row 4 ({tmp_path / 'gone' / '4.png'}) and 2 more")


def test_without_skip_bad_images_the_error_says_it_exists(vision_assets, processor, tmp_path):
    data = _bad_and_good(vision_assets, tmp_path, "one.jsonl", {1: "gone.png"}, 3)
    with pytest.raises(DataFormatError, match="set skip_bad_images=true to skip such rows"):
        _prepared(data, processor, tmp_path)


def test_skip_bad_images_with_every_row_bad_is_still_an_error(vision_assets, processor, tmp_path):
    data = _bad_and_good(vision_assets, tmp_path, "none.jsonl", {0: "a.png", 1: "b.png"}, 2)
    with pytest.raises(DataFormatError) as refused:
        _prepared(data, processor, tmp_path, skip_bad_images=True)
    assert refused.value.field == "local_datasets"
    assert refused.value.message.startswith("every one of the 2 training rows has an image that cannot be read (skip_bad_images")
    assert str(tmp_path / "a.png") in refused.value.message


def test_skip_bad_images_never_skips_a_path_outside_the_data_roots(vision_assets, processor, home, tmp_path, monkeypatch):
    """Outside the data roots is a refusal, not bad data: the run still ends."""
    (tmp_path / "data").mkdir()
    outside = str((vision_assets.data_dir / "images" / "002.png").resolve())
    (tmp_path / "data" / "in.png").write_bytes((vision_assets.data_dir / "images" / "000.png").read_bytes())
    data = _write_jsonl(tmp_path / "data" / "mixed.jsonl", [
        {"image": "in.png", "text": "A shape."}, {"image": "gone.png", "text": "A shape."}, {"image": outside, "text": "A shape."}])
    monkeypatch.setenv("TUNELAB_DATA_ROOTS", str(tmp_path / "data"))
    monkeypatch.setenv("TUNELAB_CONFINE_READS", "1")
    with pytest.raises(DataFormatError) as refused:
        _prepared(data, processor, tmp_path / "served", skip_bad_images=True)
    assert refused.value.message.startswith("row 2 of the training data: image ") and "outside the folders tunelab may read" in refused.value.message
