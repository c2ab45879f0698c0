"""`POST /api/memory/estimate` on a real server whose machine has one GPU (a stand-in
`nvidia-smi` on its PATH): the breakdown per term, the verdict a start would reach
(refused, or what memory_fit=auto would change), and field errors as usual."""

from __future__ import annotations

import json
import os

import pytest

LLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False}


@pytest.fixture
def gpu_server(start_server, tmp_path, demo_assets):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, GPU-0000, 81920, 16896, NVIDIA Test 0'\n")
    smi.chmod(0o755)
    models = tmp_path / "models"
    (models / "llama-7b").mkdir(parents=True)
    (models / "llama-7b" / "config.json").write_text(json.dumps(LLAMA_7B))
    (models / "empty").mkdir()
    own_code = models / "llama-7b-own-code"  # its own modeling file, which the estimate lists but never runs
    own_code.mkdir()
    (own_code / "config.json").write_text(json.dumps({**LLAMA_7B, "auto_map": {"AutoModelForCausalLM": "modeling_own.Own"}}))
    (own_code / "modeling_own.py").write_text("raise SystemExit('never run')\n")
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "TUNELAB_DATA_ROOTS": os.pathsep.join([str(demo_assets.root), str(models)])}
    return start_server(extra_env=env), models


def test_estimate_names_each_term_and_what_a_start_would_do(gpu_server):
    server, models = gpu_server
    body = {"model_name": str(models / "llama-7b"), "batch_size": 8, "gradient_accumulation_steps": 2, "max_seq_length": 2048}
    with server.client() as client:
        answer = client.post("/api/memory/estimate", json=body)
        assert answer.status_code == 200, answer.text
        data = answer.json()
        terms = {t["name"]: t["bytes"] for t in data["terms"]}
        assert {"weights", "adapter", "gradients", "optimizer", "activations", "logits", "cuda_overhead"} <= set(terms)
        assert terms["weights"] == 2 * 6_738_415_616 and data["total_bytes"] == sum(terms.values())
        assert data["resolved"]["gradient_checkpointing"] is True and data["resolved"]["precision"] == "bf16"
        assert data["device"]["verdict"] == "refused" and data["device"]["where"] == "GPU 0 (NVIDIA Test 0)"
        assert "16.5 GiB free" in data["device"]["message"]

        adjusted = client.post("/api/memory/estimate", json={**body, "memory_fit": "auto"}).json()["device"]
        assert adjusted["verdict"] == "adjusted"
        assert adjusted["changes"] == {"batch_size": 2, "gradient_accumulation_steps": 8}

        missing = client.post("/api/memory/estimate", json={"model_name": str(models / "empty")})
        assert missing.status_code == 422 and missing.json()["error"]["fields"][0]["field"] == "model_name"
        assert "no config.json" in missing.json()["error"]["fields"][0]["message"]
        bad = client.post("/api/memory/estimate", json={**body, "batch_size": 0})
        assert bad.status_code == 422 and bad.json()["error"]["fields"][0]["field"] == "batch_size"


def test_estimate_shows_the_models_code_files_and_their_fingerprint(gpu_server):
    from tunelab.remote_code.approval import read_remote_code

    server, models = gpu_server
    with server.client() as client:
        own = client.post("/api/memory/estimate", json={"model_name": str(models / "llama-7b-own-code")})
        assert own.status_code == 200, own.text
        fingerprint = read_remote_code(str(models / "llama-7b-own-code")).fingerprint
        shown = own.json()["remote_code"]
        assert shown["fingerprint"] == fingerprint and [f["name"] for f in shown["files"]] == ["modeling_own.py"]
        assert f"approved_remote_code_fingerprint: {fingerprint}" in shown["note"]
        plain = client.post("/api/memory/estimate", json={"model_name": str(models / "llama-7b"), "trust_remote_code": True})
        assert plain.json()["remote_code"]["fingerprint"] is None
        assert "trust_remote_code=true changes nothing" in plain.json()["remote_code"]["note"]  # a note, not an error
