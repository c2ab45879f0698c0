"""RunConfig validation: every rejection names its field and says how to fix it."""

from __future__ import annotations

import json

import pytest

from tunelab.config import ConfigError, RunConfig, check_machine, load_config_file, parse_config

BASE = {"model_name": "org/model", "local_datasets": ["data.jsonl"]}


def errors_of(**overrides):
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **overrides})
    return {e.field: e.message for e in info.value.errors}


@pytest.mark.parametrize(
    "overrides, field, words",
    [
        ({"max_steps": 0, "num_epochs": 0}, "max_steps", "both 0"),
        ({"learning_rate": 0}, "learning_rate", "between 0 and 1"),
        ({"learning_rate": 1.5}, "learning_rate", "between 0 and 1"),
        ({"use_dora": True, "use_rslora": True}, "use_rslora", "cannot be combined"),
        ({"use_loftq": True, "use_dora": True}, "use_loftq", "cannot be combined"),
        ({"training_type": "full", "use_dora": True}, "use_dora", "adapter option"),
        ({"training_type": "continued_pretraining", "use_rslora": True}, "use_rslora", "adapter option"),
        ({"training_type": "continued_pretraining", "load_in_4bit": True}, "load_in_4bit", "set load_in_4bit=false"),
        ({"warmup_steps": 10, "warmup_ratio": 0.1}, "warmup_ratio", "not both"),
        ({"learnig_rate": 1e-4}, "learnig_rate", "did you mean 'learning_rate'"),
        ({"lora_r": 0}, "lora_r", "greater than or equal to 1"),
        ({"training_type": "dpo"}, "training_type", "lora"),
        ({"slice_start": 10, "slice_end": 5}, "slice_end", "greater than slice_start"),
        ({"local_datasets": []}, "dataset", "no training data"),
        ({"column_mapping": {"prompt": "q"}}, "column_mapping", "map onto one of"),
        ({"backend": "mlx", "use_loftq": True}, "use_loftq", "mlx"),
        ({"backend": "mlx", "training_type": "qlora"}, "training_type", "mlx"),
    ],
)
def test_bad_config_names_field_and_fix(overrides, field, words):
    errors = errors_of(**overrides)
    assert field in errors, errors
    assert words in errors[field]


def test_string_booleans_and_none_for_default():
    cfg = parse_config({**BASE, "packing": "yes", "use_dora": "0", "train_on_completions": "off",
                        "seed": None, "lora_r": None, "max_grad_norm": -1})
    assert cfg.packing is True and cfg.use_dora is False and cfg.train_on_completions is False
    assert cfg.seed == 3407 and cfg.lora_r == 16
    assert cfg.max_grad_norm == 0.0  # negative clip value means "no clipping"


def test_qlora_implies_4bit_and_full_forces_it_off():
    assert parse_config({**BASE, "training_type": "qlora"}).load_in_4bit is True
    assert parse_config({**BASE, "training_type": "full", "load_in_4bit": True}).load_in_4bit is False


def test_4bit_refused_without_cuda_and_gpu_ids_checked():
    cfg = parse_config({**BASE, "training_type": "qlora"})
    with pytest.raises(ConfigError) as info:
        check_machine(cfg, cuda_device_count=0)
    assert info.value.errors[0].field == "training_type" and "CUDA" in info.value.errors[0].message
    with pytest.raises(ConfigError) as info:
        check_machine(parse_config({**BASE, "gpu_ids": [3]}), cuda_device_count=2)
    assert info.value.errors[0].field == "gpu_ids"
    check_machine(parse_config({**BASE, "gpu_ids": [1]}), cuda_device_count=2)


def test_public_form_has_no_secrets():
    cfg = parse_config({**BASE, "hf_token": "hf_SECRET1", "wandb_token": "wb_SECRET2",
                        "s3": {"bucket": "b", "access_key_id": "AKSECRET3", "secret_access_key": "SKSECRET4"}})
    text = json.dumps(cfg.public())
    for secret in ("hf_SECRET1", "wb_SECRET2", "AKSECRET3", "SKSECRET4"):
        assert secret not in text
        assert secret not in repr(cfg)
    payload = cfg.worker_payload()
    assert payload["hf_token"] == "hf_SECRET1" and payload["s3"]["secret_access_key"] == "SKSECRET4"
    assert sorted(cfg.secret_values()) == ["AKSECRET3", "SKSECRET4", "hf_SECRET1", "wb_SECRET2"]
    RunConfig.model_validate(cfg.public())  # the stored form is itself a valid config


def test_yaml_file_with_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("model_name: m\nlocal_datasets: [data/train.jsonl]\nmax_steps: 5\n")
    cfg = load_config_file(path, ["learning_rate=1e-3", "packing=true"])
    assert cfg.learning_rate == 1e-3 and cfg.packing is True and cfg.max_steps == 5
    assert cfg.local_datasets == [str(tmp_path / "data/train.jsonl")]


def test_broken_yaml_is_a_config_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model_name: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        load_config_file(path)
    assert info.value.errors[0].field == "config"
