"""The memory check of a real start: a GPU inventory the test sets (a stand-in
`nvidia-smi` on the PATH) and a model folder holding Llama-2-7B's config.json. A run that
will not fit is refused before its row exists; with memory_fit=auto it starts with a
smaller micro-batch, the same effective batch, and says so in its events."""

from __future__ import annotations

import json
import os

import pytest
import scripted_workers as sw
from orch_helpers import finished, scripted_config

from tunelab.config.run_config import ConfigError

LLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False}


@pytest.fixture
def one_gpu(tmp_path, monkeypatch):
    """`one_gpu(free_mib)`: this machine has one GPU with that much free memory."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def set_free(free_mib: int) -> None:
        smi.write_text(f"#!/bin/sh\necho '0, GPU-0000, 81920, {free_mib}, NVIDIA Test 0'\n")
        smi.chmod(0o755)

    return set_free


@pytest.fixture
def llama_7b(tmp_path):
    folder = tmp_path / "llama-7b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_7B))
    return str(folder)


def test_a_run_that_will_not_fit_is_refused_before_it_exists(orchestrator_for, one_gpu, llama_7b, store):
    one_gpu(16896)  # 16.5 GiB free
    orch, _ = orchestrator_for(sw.trainer)
    with pytest.raises(ConfigError) as refused:
        orch.start(scripted_config(model_name=llama_7b, batch_size=8, gradient_accumulation_steps=2, max_seq_length=2048))
    error = refused.value.errors[0]
    assert error.field == "memory_fit"
    assert "estimated" in error.message and "GPU 0 (NVIDIA Test 0) has 16.5 GiB free" in error.message
    assert "set batch_size=2 and gradient_accumulation_steps=8" in error.message
    assert store.list_runs() == []
    # The same run on a GPU with room starts.
    one_gpu(80000)
    run_id = orch.start(scripted_config(model_name=llama_7b, batch_size=8, gradient_accumulation_steps=2, max_seq_length=2048))
    assert finished(orch, run_id)["status"] == "completed"


def test_auto_starts_with_a_smaller_micro_batch_and_records_it(orchestrator_for, one_gpu, llama_7b, store):
    one_gpu(16896)
    orch, recorder = orchestrator_for(sw.trainer)
    run_id = orch.start(scripted_config(model_name=llama_7b, batch_size=8, gradient_accumulation_steps=2,
                                        max_seq_length=2048, memory_fit="auto"))
    row = finished(orch, run_id)
    assert row["status"] == "completed"
    assert (row["config"]["batch_size"], row["config"]["gradient_accumulation_steps"]) == (2, 8)
    note = next(e["message"] for e in recorder.of_type("status") if e["message"].startswith("memory:"))
    assert "set batch_size=2 and gradient_accumulation_steps=8" in note and "effective batch kept at 16" in note


def test_checkpointing_left_to_auto_is_off_on_a_gpu_with_room_and_on_without(orchestrator_for, one_gpu, llama_7b):
    orch, recorder = orchestrator_for(sw.trainer)
    settings = dict(model_name=llama_7b, batch_size=2, gradient_accumulation_steps=1, max_seq_length=1024)
    one_gpu(80000)  # room for the LoRA run's activations without recomputing them
    roomy = finished(orch, orch.start(scripted_config(**settings)))
    assert roomy["config"]["gradient_checkpointing"] is False
    note = next(e["message"] for e in recorder.of_type("status") if e["message"].startswith("memory:"))
    assert "trains without it" in note and "GPU 0 (NVIDIA Test 0) has 78.1 GiB free" in note
    one_gpu(18000)  # the weights fit, every layer's activations do not: checkpointing stays to the worker (on)
    tight = finished(orch, orch.start(scripted_config(**settings)))
    assert tight["status"] == "completed" and tight["config"]["gradient_checkpointing"] is None
    # A setting the user chose is never changed.
    kept = finished(orch, orch.start(scripted_config(**settings, gradient_checkpointing=True)))
    assert kept["config"]["gradient_checkpointing"] is True
