"""The real worker in spawn children on the tiny encoder: a LoRA embedding run evaluates
retrieval on held-out pairs, stops and saves a valid checkpoint, resumes from it to the
end, and leaves a sentence-transformers folder whose embeddings are the trained ones."""

from __future__ import annotations

import json

import numpy as np
import pytest
from spawned_worker import SpawnedWorker, run_to_end

from tunelab import events as ev
from tunelab.checkpoints import validate_checkpoint

pytestmark = pytest.mark.slow
STEPS = 12


def _payload(assets, out, **overrides):
    config = {
        "model_name": str(assets.model_dir), "training_type": "lora", "backend": "torch",
        "local_datasets": [str(assets.pairs)], "format": "auto", "train_split": "train", "max_seq_length": 32,
        "max_steps": STEPS, "num_epochs": 1, "learning_rate": 2e-3, "batch_size": 8, "gradient_accumulation_steps": 1,
        "lora_r": 8, "lora_alpha": 16, "lora_dropout": 0.0, "seed": 1234, "save_steps": 0, "logging_steps": 1,
        "eval_steps": 4, "eval_holdout": 0.15, "weight_decay": 0.0, "max_grad_norm": 1.0, "lr_scheduler_type": "linear",
        "optim": "adamw_torch", "embedding_loss": "auto", "output_dir": str(out), "resume_from": None,
    }
    config.update(overrides)
    return config


def test_lora_run_evaluates_stops_saves_resumes_and_exports(embedding_assets, tmp_path):
    out = tmp_path / "out"
    first = SpawnedWorker(_payload(embedding_assets, out))
    try:
        first.wait_for(lambda e: e["type"] == ev.PROGRESS and e["step"] >= 3 and e["loss"] is not None)
        first.stop(save=True)
        stopped = first.finish()
    finally:
        first.kill()
    assert stopped["type"] == ev.COMPLETE and stopped["stopped"], stopped
    step = stopped["checkpoint_step"]
    assert 3 <= step < STEPS
    assert validate_checkpoint(out / f"checkpoint-{step}").kind == "adapter"
    stages = [e["message"] for e in first.events if e["type"] == ev.STATUS]
    assert any("of an embedding model" in message for message in stages)
    assert f"Tokenizing {216 - 32} pairs rows" in stages  # 15% of the 216 pairs held out for eval

    final, second = run_to_end(_payload(embedding_assets, out, resume_from=str(out / f"checkpoint-{step}")))
    assert final["type"] == ev.COMPLETE and not final["stopped"], final
    assert [p["step"] for p in second.progress()] == list(range(step + 1, STEPS + 1))
    # A stop skips the eval of the step it lands on; the resumed run evaluates the rest.
    evaluated = [s for s in (4, 8, 12) if s > step]
    assert [p["step"] for p in second.events if p["type"] == ev.PROGRESS and p["eval_loss"] is not None] == evaluated
    # The evaluator's retrieval metrics reach the Trainer's logs with each eval loss.
    history = json.loads((out / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())["log_history"]
    evals = [entry for entry in history if "eval_loss" in entry]
    assert [entry["step"] for entry in evals if entry["step"] > step] == evaluated
    assert all(0 <= entry["eval_cosine_ndcg@10"] <= 1 and "eval_cosine_mrr@10" in entry for entry in evals)
    _output_gives_the_trained_embeddings(embedding_assets, out, _payload(embedding_assets, out))


def _output_gives_the_trained_embeddings(assets, out, config) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    from tunelab.worker.embedding_family import EmbeddingFamily
    from tunelab.worker.model_setup import device_settings

    texts = ["which tiny crimson thing is found near the ocean?", "it is small and red, and it lives by the sea."]
    exported = SentenceTransformer(str(out), device="cpu").encode(texts)
    base = SentenceTransformer(str(assets.model_dir), device="cpu")
    base_embeddings = base.encode(texts)
    trained = EmbeddingFamily().wrap(base, config, device_settings(config))
    set_peft_model_state_dict(trained[0].model, load_file(str(out / f"checkpoint-{STEPS}" / "adapter_model.safetensors")))
    assert np.abs(exported - trained.encode(texts)).max() < 1e-4
    assert np.abs(exported - base_embeddings).max() > 1e-3  # training changed the embeddings, so losing it would show

