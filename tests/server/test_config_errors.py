"""A bad run config is a 422 naming the field at fault, and nothing is started."""

from __future__ import annotations

import json

import pytest

# (case, changes to the demo body, field named, words the message must contain)
BAD_CONFIGS = [
    ("learning rate out of range", {"learning_rate": 5}, "learning_rate", "between 0 and 1"),
    ("learning rate zero", {"learning_rate": 0}, "learning_rate", "between 0 and 1"),
    ("no steps and no epochs", {"max_steps": 0, "num_epochs": 0}, "max_steps", "both 0"),
    ("two adapter variants", {"use_dora": True, "use_rslora": True}, "use_rslora", "cannot be combined"),
    ("adapter option with full fine-tuning", {"training_type": "full", "use_dora": True}, "use_dora", "adapter option"),
    ("warmup steps and ratio", {"warmup_steps": 2, "warmup_ratio": 0.1}, "warmup_ratio", "not both"),
    ("unknown setting", {"learning_rat": 1e-4}, "learning_rat", "did you mean 'learning_rate'"),
    ("wrong type", {"lora_r": "sixteen"}, "lora_r", "whole number"),
    ("unknown method", {"training_type": "magic"}, "training_type", "lora"),
    ("missing model", {"model_name": None}, "model_name", "required"),
    ("no training data", {"local_datasets": []}, "dataset", "no training data"),
    ("4-bit without CUDA", {"training_type": "qlora"}, "training_type", "CUDA"),
    ("dataset outside the readable folders", {"local_datasets": ["/etc/passwd"]}, "local_datasets", "outside"),
    ("output folder outside the outputs root", {"output_dir": "/tmp/not-managed-by-tunelab"}, "output_dir", "outside"),
]


@pytest.mark.parametrize("case,changes,field,words", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_is_a_422_naming_the_field(live_server, demo_run, case, changes, field, words):
    body = {k: v for k, v in {**demo_run(), **changes}.items() if v is not None}
    response = live_server.client().post("/api/train/start", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert field in [f["field"] for f in error["fields"]]
    message = next(f["message"] for f in error["fields"] if f["field"] == field)
    assert words.lower() in message.lower()
    assert "Traceback" not in response.text


def test_every_bad_field_is_listed(live_server, demo_run):
    body = {**demo_run(), "learning_rate": 2, "lora_r": "x", "batch_size": 0}
    error = live_server.client().post("/api/train/start", json=body).json()["error"]
    assert {f["field"] for f in error["fields"]} == {"learning_rate", "lora_r", "batch_size"}


def test_four_bad_fields_get_four_named_errors_in_plain_words(live_server, demo_run):
    """Field checks and a clash between two settings, all in one 422 (not one per attempt);
    the first error's `field` and `message` stay up front for older clients."""
    body = {**demo_run(), "learning_rate": -1, "batch_size": 0, "lora_r": "x", "warmup_steps": 2, "warmup_ratio": 0.1}
    response = live_server.client().post("/api/train/start", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    messages = {f["field"]: f["message"] for f in error["fields"]}
    assert messages == {"learning_rate": messages["learning_rate"], "batch_size": "must be 1 or more",
                        "lora_r": "must be a whole number", "warmup_ratio": "set warmup_steps or warmup_ratio, not both"}
    assert "between 0 and 1" in messages["learning_rate"]
    assert error["field"] == error["fields"][0]["field"] and error["code"] == "invalid_input"
    assert "Input should" not in response.text


def test_every_refused_path_is_named_at_once(live_server, demo_run):
    body = {**demo_run(), "local_datasets": ["/etc/passwd"], "output_dir": "/tmp/not-managed-by-tunelab"}
    response = live_server.client().post("/api/train/start", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("path_not_allowed", "local_datasets")
    assert [f["field"] for f in error["fields"]] == ["local_datasets", "output_dir"]
    assert all("outside" in f["message"] for f in error["fields"])


def test_check_validates_like_a_start_and_starts_nothing(live_server, demo_run):
    client = live_server.client()
    good = client.post("/api/train/check", json=demo_run())
    assert good.status_code == 200, good.text
    assert good.json()["config"]["max_steps"] == demo_run()["max_steps"]
    bad = client.post("/api/train/check", json={**demo_run(), "batch_size": 0, "local_datasets": ["/etc/passwd"]})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "batch_size"
    paths = client.post("/api/train/check", json={**demo_run(), "local_datasets": ["/etc/passwd"]})
    assert paths.status_code == 422 and paths.json()["error"]["code"] == "path_not_allowed"
    assert client.get("/api/runs").json()["total"] == 0


def test_a_body_that_is_not_an_object_is_refused(live_server):
    response = live_server.client().post("/api/train/start", json=["model_name", "x"])
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "body"


def test_refused_configs_start_nothing(live_server, demo_run):
    client = live_server.client()
    client.post("/api/train/start", json={**demo_run(), "learning_rate": 9})
    client.post("/api/train/start", json={**demo_run(), "local_datasets": ["../../etc/passwd"]})
    assert client.get("/api/runs").json()["total"] == 0
    status = client.get("/api/train/status").json()
    assert status["phase"] == "idle" and status["is_training_running"] is False


def test_unknown_key_and_bad_value_are_both_listed(live_server, demo_run):
    body = {**demo_run(), "lora_rnk": 8, "batch_size": 10**9}
    response = live_server.client().post("/api/train/start", json=body)
    assert response.status_code == 422
    fields = {f["field"]: f["message"] for f in response.json()["error"]["fields"]}
    assert set(fields) == {"lora_rnk", "batch_size"}
    assert "did you mean 'lora_r'" in fields["lora_rnk"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_json_literals_are_refused(live_server, demo_run, literal):
    text = json.dumps(demo_run())[:-1] + f', "lora_alpha": {literal}, "max_grad_norm": {literal}, "max_grad_value": {literal}}}'
    response = live_server.client().post("/api/train/start", content=text, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert {f["field"] for f in response.json()["error"]["fields"]} == {"lora_alpha", "max_grad_norm", "max_grad_value"}
    assert live_server.client().get("/api/runs").json()["total"] == 0


def test_a_negative_clip_bound_is_refused_naming_the_field(live_server, demo_run):
    response = live_server.client().post("/api/train/start", json={**demo_run(), "max_grad_leaf_norm": -1})
    assert response.status_code == 422, response.text
    fields = {f["field"]: f["message"] for f in response.json()["error"]["fields"]}
    assert set(fields) == {"max_grad_leaf_norm"} and "0 or more" in fields["max_grad_leaf_norm"]


def test_rename_refuses_control_and_bidi_characters(live_server):
    # Any run row will do: the name is judged before the run is looked up.
    for name in ("evil\u202etxt", "x\u009b2J", "title\x1b]0;pwned\x07"):
        response = live_server.client().patch("/api/runs/1", json={"display_name": name})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "display_name"


def test_missing_files_and_a_bare_model_folder_are_refused_before_a_run_exists(live_server, demo_run):
    datasets = live_server.home / "datasets"
    (datasets / "bare-model").mkdir(parents=True, exist_ok=True)
    body = demo_run(model_name=str(datasets / "bare-model"), local_datasets=[str(datasets / "missing.jsonl")],
                    local_eval_datasets=[str(datasets)])
    response = live_server.client().post("/api/train/start", json=body)
    assert response.status_code == 422, response.text
    fields = {f["field"]: f["message"] for f in response.json()["error"]["fields"]}
    assert "does not exist" in fields["local_datasets"] and "is a folder" in fields["local_eval_datasets"]
    assert "config.json" in fields["model_name"]
    assert live_server.client().get("/api/runs").json()["total"] == 0


def test_an_uncached_hub_model_offline_is_refused_naming_the_reason(start_server, demo_run, tmp_path):
    server = start_server(extra_env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    response = server.client().post("/api/train/start", json=demo_run(model_name="nobody-here/not-cached-model"))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "model_name"
    assert "not a local folder, and the hub cannot be reached (offline mode is on)" in error["message"]
    assert server.client().get("/api/runs").json()["total"] == 0
