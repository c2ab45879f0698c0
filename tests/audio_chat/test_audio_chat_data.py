"""The tiny Qwen2-Audio and its data, in-process: the family is told from the config (an
audio encoder beside a language model), the mlx start check refuses it, rows are checked
before training (a missing clip names its row and path; skip_bad_audio skips and counts),
the labels hold the reply only (never the prompt or an audio token), clips of any rate
become the extractor's frames, image data is refused saying what was expected, and the
audio tower stays frozen unless finetune_audio_layers is on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile

from typed_config import typed
from tunelab.demos.audio_chat import QUESTION
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.data.sources import load_raw


def _config(assets, data: Path, **extra):
    return typed({"model_name": str(assets.model_dir), "local_datasets": [str(data)], "format": "auto", "train_split": "train",
            "batch_size": 2, "gradient_accumulation_steps": 1, "max_seq_length": 128, "eval_steps": 0, **extra})


def _prepared(assets, processor, data: Path, tmp_path: Path, **extra):
    from tunelab.worker.families.audio_chat import data as audio_chat_data

    config = _config(assets, data, **extra)
    raw = load_raw(typed(config), tmp_path / "cache")
    return audio_chat_data.prepare(typed(config), processor, raw), raw


def _rows_with(assets, tmp_path: Path, bad: dict[int, str]) -> Path:
    """The demo's first eight chats, with row i's clip replaced by `bad[i]`."""
    rows = [json.loads(line) for line in assets.messages.read_text().splitlines()[:8]]
    for i, path in bad.items():
        rows[i]["messages"][0]["content"][0]["path"] = path
    (tmp_path / "not-audio.wav").write_text("this is text, not a wav file")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # The good clips stay where the demo made them: relative paths resolve beside the data file.
    (tmp_path / "clips").symlink_to(assets.data_dir / "clips")
    return data


def test_the_family_is_told_from_the_config_and_mlx_refuses_it(audio_chat_assets):
    from tunelab.orchestrator.prechecks import mlx_model_problem
    from tunelab.families import audio_chat as audio_chat_model
    from tunelab.worker.families import registry as model_family

    config = typed({"model_name": str(audio_chat_assets.model_dir)})
    assert model_family.detect(config).name == "audio_chat"
    raw = json.loads((audio_chat_assets.model_dir / "config.json").read_text())
    assert audio_chat_model.config_dict_is_audio_chat(raw)
    # Seeing as well as listening (Gemma 3n) is vision-language; an encoder-decoder is speech.
    assert not audio_chat_model.config_dict_is_audio_chat({**raw, "vision_config": {}})
    assert not audio_chat_model.config_dict_is_audio_chat({"model_type": "whisper", "is_encoder_decoder": True})
    assert "audio chat model" in mlx_model_problem(str(audio_chat_assets.model_dir))


def test_labels_hold_the_reply_only_and_clips_become_the_extractors_frames(audio_chat_assets, audio_processor, tmp_path):
    prepared, _ = _prepared(audio_chat_assets, audio_processor, audio_chat_assets.messages, tmp_path, train_on_completions=True)
    rows = [prepared.train[i] for i in range(3)]  # 22.05, 16 and 44.1 kHz clips
    batch = prepared.collator(rows)
    tokenizer = audio_processor.tokenizer
    audio_id = tokenizer.convert_tokens_to_ids(audio_processor.audio_token)
    replies = [json.loads(line)["messages"][1]["content"][0]["text"]
               for line in audio_chat_assets.messages.read_text().splitlines()[:3]]
    for i, row in enumerate(rows):
        labels = batch["labels"][i]
        assert tokenizer.decode(labels[labels != -100]) == replies[i] + "<|im_end|>"
        assert QUESTION in row["text"]  # the prompt is there, and takes no loss
        seconds = soundfile.info(row["audios"][0]["path"]).duration
        frames = int(batch["feature_attention_mask"][i].sum())
        assert abs(frames - seconds * 100) <= 2  # 10 ms frames at the extractor's 16 kHz, whatever the file's rate
        assert int((batch["input_ids"][i] == audio_id).sum()) == ((frames - 1) // 2 + 1 - 2) // 2 + 1
    assert not (set(batch["labels"][batch["labels"] != -100].tolist()) & prepared.collator.marker_ids)


def test_a_missing_clip_names_its_row_and_path(audio_chat_assets, audio_processor, tmp_path):
    data = _rows_with(audio_chat_assets, tmp_path, {3: "clips/nowhere.wav"})
    with pytest.raises(DataFormatError) as caught:
        _prepared(audio_chat_assets, audio_processor, data, tmp_path)
    message = str(caught.value)
    assert caught.value.field == "local_datasets"
    assert "row 3 of the training data" in message and str(tmp_path / "clips" / "nowhere.wav") in message
    assert "does not exist" in message and "skip_bad_audio=true" in message


def test_skip_bad_audio_skips_and_counts(audio_chat_assets, audio_processor, tmp_path):
    data = _rows_with(audio_chat_assets, tmp_path, {1: "clips/nowhere.wav", 5: "not-audio.wav"})
    prepared, _ = _prepared(audio_chat_assets, audio_processor, data, tmp_path, skip_bad_audio=True)
    assert len(prepared.train) == 6
    (note,) = prepared.notes
    assert note.startswith("Skipped 2 of 8 training rows whose audio is missing, unreadable, empty or too long (skip_bad_audio)")
    assert "row 1 (" in note and "nowhere.wav: missing" in note and "row 5 (" in note and "not-audio.wav: unreadable" in note


def test_image_data_is_refused_saying_what_was_expected(audio_chat_assets, tmp_path):
    from tunelab.worker.families.audio_chat.data import check_shape

    data = tmp_path / "captions.jsonl"
    data.write_text(json.dumps({"image": "a.png", "text": "A red circle."}) + "\n")
    config = _config(audio_chat_assets, data)
    with pytest.raises(DataFormatError, match=r"audio chat model and trains on chat messages with audio parts.*reads as caption") as caught:
        check_shape(typed(config), load_raw(typed(config), tmp_path / "cache"))
    assert caught.value.field == "format" and '"type": "audio"' in str(caught.value)


def test_the_audio_tower_stays_frozen_unless_switched_on(audio_chat_assets):
    from tunelab.worker import model_setup
    from tunelab.worker.families import registry as model_family

    config = typed({"model_name": str(audio_chat_assets.model_dir), "training_type": "lora", "backend": "torch", "precision": "fp32"})
    family = model_family.detect(config)
    device = model_setup.device_settings(typed(config))
    model = family.load(config, device).model
    outside_language = ("model.audio_tower.", "model.multi_modal_projector.")
    assert not [n for n in family.targets(model, config) if n.startswith(outside_language)]
    assert [n for n in family.targets(model, typed(config, finetune_audio_layers=True)) if n.startswith(outside_language)]
    full = family.wrap(model, typed(config, training_type="full"), device)
    trainable = {n for n, p in full.named_parameters() if p.requires_grad}
    assert trainable and not [n for n in trainable if n.startswith(outside_language)]
    assert any(n.startswith("model.language_model.") for n in trainable) and "lm_head.weight" in trainable


def test_text_only_data_trains_an_audio_chat_model_as_a_language_model(audio_chat_assets, tmp_path):
    from tunelab.worker import model_setup
    from tunelab.worker.families import registry as model_family

    data = tmp_path / "text.jsonl"
    data.write_text("".join(json.dumps({"instruction": "Count to three.", "output": "one two three"}) + "\n" for _ in range(6)))
    config = _config(audio_chat_assets, data, training_type="lora", backend="torch", precision="fp32")
    family = model_family.detect(config)
    loaded = family.load(config, model_setup.device_settings(typed(config)))
    raw = load_raw(typed(config), tmp_path / "cache")
    prepared = family.prepare(typed(config), loaded, raw)
    assert family.modality(raw) == "text" and prepared.collator is None  # the text path's rows and TRL's collator
    assert "<|im_start|>assistant" in loaded.tokenizer.decode(prepared.train[0]["input_ids"])  # rendered as the audio rows are


def test_full_fine_tuning_trains_the_language_model_and_keeps_the_base_audio_tower(audio_chat_assets, tmp_path):
    """training_type=full through the family's real trainer and save (in-process, two steps): the
    saved folder reloads with AutoProcessor + AutoModelForMultimodalLM, its audio tower and
    projector are the base's to the bit, and the language model's weights moved."""
    import torch
    from transformers import AutoModelForMultimodalLM, AutoProcessor

    from tunelab.demos.audio_chat import audio_chat_demo_config
    from tunelab.worker import model_setup
    from tunelab.worker.families import registry as model_family

    out = tmp_path / "out"
    config = typed({**dict(audio_chat_demo_config(audio_chat_assets, steps=2, training_type="full", precision="fp32")),
              "output_dir": str(out)})
    family = model_family.detect(config)
    device = model_setup.device_settings(typed(config))
    loaded = family.load(config, device)
    prepared = family.prepare(typed(config), loaded, load_raw(typed(config), tmp_path / "cache"))
    model = family.wrap(loaded.model, config, device)
    trainer = family.build_trainer(typed(config), device, model, loaded, prepared, out, [])
    trainer.train()
    family.save_final(trainer, loaded, out)
    assert AutoProcessor.from_pretrained(out).audio_token == "<|AUDIO|>"
    trained = AutoModelForMultimodalLM.from_pretrained(out, dtype=torch.float32).state_dict()
    base = AutoModelForMultimodalLM.from_pretrained(audio_chat_assets.model_dir, dtype=torch.float32).state_dict()
    assert trained.keys() == base.keys()
    audio = [n for n in base if n.startswith(("model.audio_tower.", "model.multi_modal_projector."))]
    assert audio and all(torch.equal(trained[n], base[n]) for n in audio)
    changed = [n for n in base if n not in audio and not torch.equal(trained[n], base[n])]
    assert any(".layers." in n for n in changed) and "lm_head.weight" in changed
