"""Sesame CSM pieces in-process: a CSM model is told from its config's model_type (never its
name) and mlx refuses it; data without audio says what a CSM model trains on and what it
saw; a speaker that is not an integer id is refused naming the column; and a row made from
cached Mimi codes gives exactly the loss transformers' CSM computes from the raw audio
through its own processor, with the codec never trained."""

from __future__ import annotations

import json
import shutil

import pytest

from typed_config import typed
from tunelab.demos.csm import ensure_csm_demo_assets
from tunelab.worker.data.formats import DataFormatError


@pytest.fixture(scope="module")
def csm_assets(speech_assets, tmp_path_factory):
    return ensure_csm_demo_assets(speech_assets.transcripts, tmp_path_factory.mktemp("csm") / "assets")


def test_a_csm_model_is_told_from_its_config_and_mlx_refuses_it(csm_assets, demo_assets, tmp_path):
    from tunelab.orchestrator.prechecks import mlx_model_problem
    from tunelab.worker.families import registry as model_family
    from tunelab.worker.families.tts import layout as tts_layout

    renamed = tmp_path / "llama-3-8b-instruct"  # the name says a text model; the config says CSM
    shutil.copytree(csm_assets.model_dir, renamed)
    assert type(model_family.detect(typed({"model_name": str(renamed)}))).__name__ == "CsmFamily"
    assert "text-to-speech" in mlx_model_problem(str(renamed)) and "backend=torch" in mlx_model_problem(str(renamed))
    # Its codec is the one inside it: an Orpheus codec setting is refused, naming the field.
    from tunelab.worker.context import RunSettingError
    from tunelab.worker.families.csm.family import CsmFamily

    with pytest.raises(RunSettingError) as caught:
        CsmFamily().load(typed({"model_name": str(renamed), "tts_codec": str(renamed)}), None)
    assert caught.value.field == "tts_codec" and "Mimi codec inside it" in caught.value.message
    named = tmp_path / "sesame-csm-1b"  # and the name alone makes nothing CSM
    shutil.copytree(demo_assets.model_dir, named)
    assert type(model_family.detect(typed({"model_name": str(named)}))).__name__ == "TextFamily"
    assert not tts_layout.config_dict_is_tts(json.loads((named / "config.json").read_text()))


def _rows_file(tmp_path, rows, name="rows.jsonl"):
    data = tmp_path / name
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data


def test_data_without_audio_says_what_a_csm_model_expects_and_what_it_saw(csm_assets, tmp_path):
    from tunelab.worker.families.csm import data as csm_data
    from tunelab.worker.data.sources import load_raw

    data = tmp_path / "text.jsonl"
    data.write_text("".join(json.dumps({"text": f"sentence {i}"}) + "\n" for i in range(4)))
    config = typed({"model_name": str(csm_assets.model_dir), "local_datasets": [str(data)], "batch_size": 2})
    with pytest.raises(DataFormatError) as caught:
        csm_data.prepare(typed(config), None, None, None, load_raw(typed(config), tmp_path / "cache"), tmp_path / "out")
    message = caught.value.message
    assert caught.value.field == "format"
    assert "text-to-speech model and trains on text with the audio that speaks it" in message  # what it expected
    assert "the data reads as text with columns ['text']" in message  # what it saw
    assert "speaker column (integer ids)" in message


def test_cached_codes_give_the_loss_transformers_csm_computes_and_the_codec_never_trains(csm_assets, speech_assets, tmp_path):
    import torch
    from transformers import AutoProcessor, CsmForConditionalGeneration

    from tunelab.worker import model_setup

    from tunelab.worker.families.csm import data as csm_data
    from tunelab.worker.families.csm.family import CsmFamily
    from tunelab.worker.families.csm.model import codec_of
    from tunelab.worker.families.csm.trainer import CsmTrainer
    from tunelab.worker.data.sources import load_raw
    from tunelab.worker.families.speech.collator import decode_clip

    first = json.loads(speech_assets.transcripts.read_text().splitlines()[0])
    clip = str(speech_assets.data_dir / first["audio"])
    rows = [{"audio": clip, "text": first["text"], "speaker": "3"}, {"audio": clip, "text": first["text"], "speaker": 1}]
    config = typed({"model_name": str(csm_assets.model_dir), "local_datasets": [str(_rows_file(tmp_path, rows))],
              "batch_size": 2, "max_seq_length": 512})
    processor = AutoProcessor.from_pretrained(csm_assets.model_dir)
    model = CsmForConditionalGeneration.from_pretrained(csm_assets.model_dir).eval()
    codec = codec_of(model)
    prepared = csm_data.prepare(typed(config), processor, model.config, codec, load_raw(typed(config), tmp_path / "cache"), tmp_path / "out")
    assert prepared.notes[0].startswith("Encoded 2 training clips")
    # The demo codec's seeded codebooks give varied codes, not CSM's end-of-audio frame (all 0) throughout.
    frames = prepared.train[0]["codes"]
    assert len({tuple(frame) for frame in frames}) > len(frames) // 2 and not any(frame[:-1] == [0] * 3 for frame in frames)

    # transformers' own way: the processor expands <|AUDIO|> to the clip's frames, the model encodes the raw audio.
    tokenizer = processor.tokenizer
    text = f"{tokenizer.bos_token}[3]{first['text']}{tokenizer.eos_token}<|AUDIO|><|audio_eos|>"
    theirs = processor(text, audio=decode_clip({"path": clip, "bytes": None}, codec.rate), output_labels=True)
    assert theirs["input_ids"][0].tolist() == prepared.train[0]["input_ids"]
    batch = prepared.collator([prepared.train[0]])
    trainer = CsmTrainer.__new__(CsmTrainer)  # compute_loss needs only the accelerator
    from accelerate import Accelerator

    trainer.accelerator = Accelerator(cpu=True)
    with torch.no_grad():
        expected = model(**theirs).loss
        ours = trainer.compute_loss(model, batch)
    assert torch.allclose(ours, expected, atol=1e-5), (ours, expected)

    # A speaker that is not an integer id is refused naming the column.
    bad = typed(config, local_datasets=[str(_rows_file(tmp_path, [{**rows[0], "speaker": "tara"}] * 2, "bad.jsonl"))])
    with pytest.raises(DataFormatError) as caught:
        csm_data.prepare(typed(bad), processor, model.config, codec, load_raw(typed(bad), tmp_path / "cache2"), tmp_path / "out")
    assert caught.value.field == "speaker" and "integer ids" in caught.value.message

    # LoRA adapts the backbone and depth decoder only; full fine-tuning freezes the codec too.
    family, device = CsmFamily(), model_setup.device_settings(typed({}))
    lora = family.wrap(CsmForConditionalGeneration.from_pretrained(csm_assets.model_dir), typed({"training_type": "lora"}), device)
    trainer.compute_loss(lora.train(), batch).backward()
    trained = {name for name, p in lora.named_parameters() if p.grad is not None}
    assert trained and all("lora_" in name and "codec_model" not in name for name in trained)
    full = family.wrap(model, typed({"training_type": "full"}), device)
    assert all(not p.requires_grad for p in full.codec_model.parameters())
    assert all(p.requires_grad for name, p in full.named_parameters() if not name.startswith("codec_model."))
    trainer.compute_loss(full.train(), batch).backward()
    assert all(p.grad is None for p in full.codec_model.parameters())


def test_a_bad_csm_clip_is_refused_before_any_is_encoded_or_skipped_and_counted_also_from_the_cache(csm_assets, speech_assets,
                                                                                                    tmp_path):
    from transformers import AutoProcessor, CsmForConditionalGeneration

    from tunelab.worker.families.csm import data as csm_data
    from tunelab.worker.families.csm.model import codec_of
    from tunelab.worker.data.sources import load_raw

    first = json.loads(speech_assets.transcripts.read_text().splitlines()[0])
    clip = str(speech_assets.data_dir / first["audio"])
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"not audio at all")
    rows = [{"audio": clip, "text": first["text"]}] * 2 + [{"audio": str(tmp_path / "missing.wav"), "text": "a"},
                                                             {"audio": str(garbage), "text": "b"}]
    data = _rows_file(tmp_path, rows)
    processor = AutoProcessor.from_pretrained(csm_assets.model_dir)
    model = CsmForConditionalGeneration.from_pretrained(csm_assets.model_dir).eval()
    codec, encoded = codec_of(model), []
    real_encode = codec.encode
    codec.encode = lambda samples: encoded.append(1) or real_encode(samples)  # counts the clips the codec encodes

    def prepare(**settings):
        config = typed({"model_name": str(csm_assets.model_dir), "local_datasets": [str(data)], "batch_size": 2, "max_seq_length": 512,
                  **settings})
        return csm_data.prepare(typed(config), processor, model.config, codec, load_raw(typed(config), tmp_path / "cache"), tmp_path / "out")

    with pytest.raises(DataFormatError) as caught:
        prepare()
    assert caught.value.field == "local_datasets" and not encoded
    assert caught.value.message.startswith(f"row 2 of the training data: audio {tmp_path / 'missing.wav'} (column 'audio') ")
    assert caught.value.message.endswith("or set skip_bad_audio=true to skip such rows")
    skipped = prepare(skip_bad_audio=True)
    note = (f"Skipped 2 of 4 training rows whose audio is missing, unreadable, empty or too long (skip_bad_audio): "
            f"row 2 ({tmp_path / 'missing.wav'}: missing), row 3 ({garbage}: unreadable)")
    assert len(skipped.train) == 2 and len(encoded) == 2 and skipped.notes[0].startswith("Encoded 2 training clips")
    assert skipped.notes[1].startswith(note)
    # A resumed run (same folder) reads the skipped rows from the cache and says so again; without the setting it refuses.
    again = prepare(skip_bad_audio=True)
    assert len(encoded) == 2 and again.notes[0].startswith("Reused the codec tokens of 2 training clips")
    assert again.notes[1] == skipped.notes[1] and again.train["input_ids"] == skipped.train["input_ids"]
    with pytest.raises(DataFormatError):
        prepare()
    assert len(encoded) == 2


def test_the_demo_refuses_an_unknown_tts_family_naming_the_option(home):
    from typer.testing import CliRunner

    from tunelab.cli.main import app

    result = CliRunner().invoke(app, ["demo", "--modality", "tts", "--tts-family", "wavenet"])
    said = " ".join(result.output.split())  # the console wraps long lines
    assert result.exit_code == 2 and "--tts-family" in said and "use orpheus or csm, with --modality tts" in said, said
