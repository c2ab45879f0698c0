"""RunConfig validation: every rejection names its field and says how to fix it."""

from __future__ import annotations

import json

import pytest

from tunelab.config.run_config import ConfigError, RunConfig, check_machine, parse_config
from tunelab.config.files import load_config_file

BASE = {"model_name": "org/model", "local_datasets": ["data.jsonl"]}


def errors_of(**overrides):
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **overrides})
    return {e.field: e.message for e in info.value.errors}


def test_field_errors_and_cross_field_problems_come_in_one_attempt():
    """A bad value and a clash between two other settings are both reported, in plain words;
    a clash that involves a refused field is not reported beside it."""
    errors = errors_of(learning_rate=-1, batch_size=0, warmup_steps=2, warmup_ratio=0.1, use_dora=True, use_rslora=True,
                       max_steps=-3, num_epochs=0)
    assert set(errors) == {"learning_rate", "batch_size", "warmup_ratio", "use_rslora", "max_steps"}, errors
    assert errors["batch_size"] == "must be 1 or more"
    assert errors["max_steps"] == "must be 0 or more"  # not also "both 0": max_steps was refused itself
    assert "not both" in errors["warmup_ratio"]


def test_a_missing_model_does_not_hide_the_other_problems():
    with pytest.raises(ConfigError) as info:
        parse_config({"learning_rate": 3, "warmup_steps": 2, "warmup_ratio": 0.1})
    errors = {e.field: e.message for e in info.value.errors}
    assert errors == {"model_name": "is required", "learning_rate": errors["learning_rate"],
                      "warmup_ratio": "set warmup_steps or warmup_ratio, not both", "dataset": errors["dataset"]}
    assert "no training data" in errors["dataset"]


def test_plain_words_for_types_and_choices():
    errors = errors_of(lora_r="sixteen", num_epochs="many", packing="perhaps", training_type="magic", train_split="")
    assert errors == {"lora_r": "must be a whole number", "num_epochs": "must be a number", "packing": "must be true or false",
                      "training_type": "must be one of 'lora', 'qlora', 'full' or 'continued_pretraining'",
                      "train_split": "must not be empty"}


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
        ({"lora_r": 0}, "lora_r", "must be 1 or more"),
        ({"training_type": "dpo"}, "training_type", "lora"),
        ({"slice_start": 10, "slice_end": 5}, "slice_end", "greater than slice_start"),
        ({"local_datasets": []}, "dataset", "no training data"),
        ({"column_mapping": {"question": "q"}}, "column_mapping", "map onto one of"),
        ({"backend": "mlx", "use_loftq": True}, "use_loftq", "mlx"),
        ({"backend": "mlx", "training_type": "qlora"}, "training_type", "mlx"),
        ({"export_after": "gguf"}, "export_after", "tunelab export RUN --format gguf"),
        ({"export_after": "onnx"}, "export_after", "use one of merged, adapter"),
        ({"export_after": "adapter", "training_type": "full"}, "export_after", "set export_after=merged"),
        ({"export_after": "merged", "backend": "mlx"}, "export_after", "backend=torch"),
        ({"export_after": "merged", "format": "pairs"}, "export_after", "sentence-transformers"),
        ({"s3": {"bucket": "b", "access_key_id": "AKIA1"}}, "s3", "secret_access_key is not: give both"),
        ({"s3": {"bucket": "b", "secret_access_key": "s"}}, "s3", "access_key_id is not: give both"),
        ({"max_grad_value": -0.5}, "max_grad_value", "set 0 to turn this clipping off"),
        ({"max_grad_leaf_norm": -1}, "max_grad_leaf_norm", "must be 0 or more, got -1"),
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


def test_gradient_clips_are_off_by_default_and_kept_in_the_stored_config_and_the_worker_payload():
    assert parse_config(BASE).public()["max_grad_value"] is None
    cfg = parse_config({**BASE, "max_grad_value": 0.5, "max_grad_leaf_norm": "2", "max_grad_norm": 0})
    for kept in (cfg.public(), cfg.worker_payload()):
        assert (kept["max_grad_value"], kept["max_grad_leaf_norm"], kept["max_grad_norm"]) == (0.5, 2.0, 0.0)


def test_export_after_is_normalised_and_allowed_where_the_export_would_be():
    assert parse_config({**BASE, "export_after": " Merged "}).export_after == "merged"
    assert parse_config({**BASE, "export_after": ""}).export_after is None
    # A full run has nothing to merge: its merged export is its weights in the half type, as `tunelab export` writes.
    assert parse_config({**BASE, "export_after": "merged", "training_type": "full"}).export_after == "merged"


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
    # Every problem with this machine at once, not one per attempt.
    with pytest.raises(ConfigError) as info:
        check_machine(parse_config({**BASE, "gpu_ids": [3], "num_processes": 2}), cuda_device_count=2)
    assert [e.field for e in info.value.errors] == ["gpu_ids", "num_processes"]


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


# --- hostile values: refused at parse, before any filesystem call or worker ------------
@pytest.mark.parametrize(
    "overrides, field, words",
    [
        ({"output_dir": "x" * 300}, "output_dir", "at most 255 bytes"),
        ({"model_name": "m" * 256}, "model_name", "at most 255 bytes"),
        ({"resume_from": "/tmp/" + "r" * 300}, "resume_from", "at most 255 bytes"),
        ({"local_datasets": ["/d/" * 1400 + "a.jsonl"]}, "local_datasets.0", "at most 4096"),
        ({"subset": "s" * 257}, "subset", "at most 256"),
        ({"target_modules": ["q" * 300]}, "target_modules.0", "at most 256"),
        ({"display_name": "n" * 201}, "display_name", "at most 200"),
        ({"batch_size": 1_000_000_000}, "batch_size", "must be 4096 or less"),
        ({"gradient_accumulation_steps": 10**6}, "gradient_accumulation_steps", "or less"),
        ({"num_epochs": 1e9}, "num_epochs", "or less"),
        ({"max_steps": 10**12}, "max_steps", "or less"),
        ({"save_steps": 10**12}, "save_steps", "or less"),
        ({"eval_steps": 10**12}, "eval_steps", "or less"),
        ({"seed": 2**32}, "seed", "or less"),
        ({"seed": -1}, "seed", "must be 0 or more"),
        ({"slice_end": 10**15}, "slice_end", "or less"),
        ({"lora_alpha": float("inf")}, "lora_alpha", "finite"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm", "finite"),
        ({"max_grad_value": float("nan")}, "max_grad_value", "finite"),
        ({"max_grad_leaf_norm": float("inf")}, "max_grad_leaf_norm", "finite"),
        ({"learning_rate": float("nan")}, "learning_rate", "finite"),
        ({"eval_holdout": float("nan")}, "eval_holdout", "finite"),
        ({"model_name": "org/m\x1b]0;pwned\x07"}, "model_name", "U+001B"),
        ({"display_name": "run\u009b2J"}, "display_name", "U+009B"),
        ({"display_name": "evil\u202etxt.exe"}, "display_name", "U+202E"),
        ({"output_dir": "runs/a\nb"}, "output_dir", "U+000A"),
        ({"output_dir": "runs/\u2066x"}, "output_dir", "U+2066"),
        ({"s3": {"bucket": "b\x07"}}, "s3.bucket", "U+0007"),
    ],
)
def test_hostile_values_are_refused_naming_the_field(overrides, field, words):
    errors = errors_of(**overrides)
    assert field in errors, errors
    assert words in errors[field]


def test_a_control_character_in_a_mapping_key_is_refused_and_shown_escaped():
    errors = errors_of(role_mapping={"bot\x1b[2J": "assistant"})
    (field, message), = errors.items()
    assert field.startswith("role_mapping.") and "\x1b" not in field and "\\x1b" in field
    assert "U+001B" in message


def test_non_finite_numbers_from_json_text_are_refused(tmp_path):
    # Python's JSON parser accepts the NaN/Infinity literals; the config must not.
    path = tmp_path / "run.json"
    path.write_text('{"model_name": "m", "local_datasets": ["d.jsonl"], "lora_alpha": Infinity, "weight_decay": NaN}')
    with pytest.raises(ConfigError) as info:
        load_config_file(path)
    assert {e.field for e in info.value.errors} == {"lora_alpha", "weight_decay"}


def test_unknown_key_and_bad_value_are_reported_together():
    errors = errors_of(lora_rnk=8, batch_size=0, learning_rate=3)
    assert set(errors) == {"lora_rnk", "batch_size", "learning_rate"}
    assert "did you mean 'lora_r'" in errors["lora_rnk"]


def test_role_names_that_look_like_secret_names_are_stored(tmp_path):
    from tunelab.store import Store

    cfg = parse_config({**BASE, "role_mapping": {"token": "user", "password": "assistant"},
                        "column_mapping": {"text": "api_key"}})
    store = Store(tmp_path / "runs.db")
    run_id = store.create_run(cfg.public(), cfg.model_name, cfg.dataset_label)
    assert store.get_run(run_id)["config"]["role_mapping"] == {"token": "user", "password": "assistant"}


def test_the_store_refuses_non_standard_json(tmp_path):
    from tunelab.store import InvalidValue, Store

    with pytest.raises(InvalidValue, match="NaN and Infinity"):
        Store(tmp_path / "runs.db").create_run({"model_name": "m", "lora_alpha": float("inf")}, "m", "d")


def test_unknown_key_and_a_cross_field_problem_are_reported_together():
    errors = errors_of(lora_rnk=8, warmup_steps=2, warmup_ratio=0.1)
    assert set(errors) == {"lora_rnk", "warmup_ratio"}


def test_a_secret_with_control_characters_is_refused_without_being_quoted():
    errors = errors_of(hf_token="hf_abc\r\nX-Injected: 1")
    assert "U+000D" in errors["hf_token"] and "hf_abc" not in errors["hf_token"]
