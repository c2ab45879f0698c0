"""`POST /api/runs/{id}/export` on a real server: exports land inside the outputs root,
errors use the API's error shape, and the server itself never loads torch."""

from __future__ import annotations

from pathlib import Path

import pytest

from export_helpers import start_server

pytestmark = pytest.mark.slow
TOKEN = "export-test-token"


@pytest.fixture(scope="module")
def api(lora_run):
    server = start_server(lora_run.home, TOKEN)
    with server.client(TOKEN) as client:
        yield client
    server.stop()


def test_adapter_and_merged_exports_through_the_api(api, lora_run):
    answer = api.post(f"/api/runs/{lora_run.run_id}/export", json={"dest": "api/adapter"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["format"] == "adapter" and body["dtype"] is None and body["kind"] == "adapter"
    assert Path(body["dest"]) == lora_run.outputs_root / "api" / "adapter"
    assert {"adapter_model.safetensors", "adapter_config.json"} <= set(body["files"])
    assert (Path(body["dest"]) / "adapter_model.safetensors").is_file()

    merged = api.post(f"/api/runs/{lora_run.run_id}/export", json={"format": "merged", "dtype": "bfloat16", "dest": "api/merged"})
    assert merged.status_code == 200, merged.text
    assert "model.safetensors" in merged.json()["files"] and merged.json()["dtype"] == "bfloat16"
    # The merge ran in a child process: the server still has no training library loaded.
    health = api.get("/api/health", params={"detail": 1}).json()
    assert health["heavy_modules"] == []


@pytest.mark.parametrize(("body", "status", "code", "field"), [
    ({"dest": "/etc/tunelab-export"}, 422, "path_not_allowed", "dest"),
    ({"dest": "../../elsewhere"}, 422, "path_not_allowed", "dest"),
    ({"format": "onnx"}, 422, "invalid_input", "format"),
    ({"format": "adapter", "dtype": "float16"}, 422, "invalid_input", "dtype"),
    ({"format": "adapter", "surprise": 1}, 422, "invalid_input", "surprise"),
])
def test_bad_requests_name_the_field(api, lora_run, body, status, code, field):
    answer = api.post(f"/api/runs/{lora_run.run_id}/export", json=body)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == code and error["field"] == field
    assert not Path("/etc/tunelab-export").exists()
    assert not (lora_run.home.parent / "elsewhere").exists()


def test_unknown_run_is_404_and_the_token_is_required(api, lora_run):
    missing = api.post("/api/runs/987654/export", json={})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found"
    anonymous = api.post(f"/api/runs/{lora_run.run_id}/export", json={}, headers={"Authorization": ""})
    assert anonymous.status_code == 401
