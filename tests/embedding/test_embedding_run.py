"""Embedding runs through the real orchestrator, worker and store.

A LoRA run on query/passage pairs evaluates retrieval on held-out pairs, stops and saves
a valid adapter checkpoint, resumes from it to the end (the step count continues in the
store), and leaves a sentence-transformers folder whose embeddings are base + trained
adapter (and which export does not treat as a generative model). The demo's full
fine-tune shows retrieval quality rising on held-out pairs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from orch_helpers import EventRecorder

from typed_config import typed
from tunelab import paths
from tunelab.checkpoints import validate_checkpoint
from tunelab.demos.embedding import embedding_demo_config, eval_history
from tunelab.export.plan import ExportInputError, plan_export
from tunelab.orchestrator import Orchestrator
from tunelab.store import Store

pytestmark = pytest.mark.slow
RUN_WAIT_S = 300
LORA_STEPS = 16
DEMO_STEPS = 40
TEXTS = ["which tiny crimson thing is found near the ocean?", "it is small and red, and it lives by the sea."]


def _finished(orchestrator: Orchestrator, run_id: int) -> dict:
    assert orchestrator.wait_idle(RUN_WAIT_S), "the run did not finish"
    return orchestrator.store.get_run(run_id)


def test_lora_run_evaluates_stops_saves_resumes_and_exports(embedding_assets, home):
    config = embedding_demo_config(embedding_assets, steps=LORA_STEPS, training_type="lora", learning_rate=2e-3, lora_r=8,
                                   lora_alpha=16, batch_size=8, eval_steps=4, display_name="embedding lora")
    with Store(paths.db_path()) as store:
        orchestrator = Orchestrator(store)
        recorder = EventRecorder()
        orchestrator.subscribe(recorder)
        try:
            first = orchestrator.start(config)
            recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= 5, timeout=240)
            orchestrator.stop(save=True, expected_run_id=first)
            first_row = _finished(orchestrator, first)
            assert first_row["status"] == "stopped", first_row["error_message"]
            stopped_at = first_row["final_step"]
            assert 5 <= stopped_at < LORA_STEPS
            assert validate_checkpoint(Path(first_row["output_dir"]) / f"checkpoint-{stopped_at}").kind == "adapter"
            stages = [e["message"] for e in recorder.of_type("status") if e.get("run_id") == first]
            assert any("lora of an embedding model" in message for message in stages)
            assert first_row["modality"] == "embedding"

            second = orchestrator.resume(first)
            row = _finished(orchestrator, second)
            assert row["status"] == "completed", row["error_message"]
            resumed = store.get_metrics(second)
            assert [m["step"] for m in resumed if m["loss"] is not None] == list(range(stopped_at + 1, LORA_STEPS + 1))
            evaluated = [m["step"] for m in store.get_metrics(first) + resumed if m["eval_loss"] is not None]
            # The evaluator's retrieval metrics ride the progress events' extras into the store.
            ndcg = store.get_metric_extras(first).get("eval_cosine_ndcg@10", {"steps": []})["steps"] + \
                store.get_metric_extras(second).get("eval_cosine_ndcg@10", {"steps": []})["steps"]
        finally:
            orchestrator.shutdown()
    # A stop skips the eval of the step it lands on; every other eval happened, in one run or the other.
    assert evaluated == [s for s in (4, 8, 12, 16) if s != stopped_at]
    assert ndcg == evaluated
    output = Path(row["output_dir"])
    # The evaluator's retrieval metrics reach the Trainer's logs with each eval loss.
    history = json.loads((output / f"checkpoint-{LORA_STEPS}" / "trainer_state.json").read_text())["log_history"]
    assert all(0 <= entry["eval_cosine_ndcg@10"] <= 1 and "eval_cosine_mrr@10" in entry for entry in history if "eval_loss" in entry)
    _output_gives_the_trained_embeddings(embedding_assets, output, typed(config.worker_payload()))
    with pytest.raises(ExportInputError, match="already is a sentence-transformers folder"):
        plan_export(row, second, "merged", None, None)


def _output_gives_the_trained_embeddings(assets, output: Path, config) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer

    from tunelab.worker.families.embedding.family import EmbeddingFamily
    from tunelab.worker.model_setup import device_settings

    exported = SentenceTransformer(str(output), device="cpu").encode(TEXTS)
    base = SentenceTransformer(str(assets.model_dir), device="cpu")
    base_embeddings = base.encode(TEXTS)
    trained = EmbeddingFamily().wrap(base, config, device_settings(config))
    set_peft_model_state_dict(trained[0].model, load_file(str(output / f"checkpoint-{LORA_STEPS}" / "adapter_model.safetensors")))
    assert np.abs(exported - trained.encode(TEXTS)).max() < 1e-4
    assert np.abs(exported - base_embeddings).max() > 1e-3  # training changed the embeddings, so losing it would show


def test_embedding_demo_learns_to_retrieve(embedding_assets, home):
    with Store(paths.db_path()) as store:
        orchestrator = Orchestrator(store)
        try:
            run_id = orchestrator.start(embedding_demo_config(embedding_assets, steps=DEMO_STEPS))
            row = _finished(orchestrator, run_id)
            metrics = store.get_metrics(run_id)
            store_ndcg = store.get_metric_extras(run_id)["eval_cosine_ndcg@10"]["values"]
        finally:
            orchestrator.shutdown()
    assert row["status"] == "completed", row["error_message"]
    assert [m["step"] for m in metrics if m["loss"] is not None] == list(range(1, DEMO_STEPS + 1))
    assert [m["step"] for m in metrics if m["eval_loss"] is not None] == [10, 20, 30, 40]
    assert [round(v, 6) for v in store_ndcg] == [round(v, 6) for _, v in eval_history(row["output_dir"])]
    # Queries and passages share no informative word: retrieval rises only as the encoder
    # learns which words mean the same.
    ndcg = eval_history(row["output_dir"])
    assert [step for step, _ in ndcg] == [10, 20, 30, 40]
    assert ndcg[-1][1] > ndcg[0][1] + 0.2 and ndcg[-1][1] > 0.8, ndcg

    from sentence_transformers import SentenceTransformer

    output = Path(row["output_dir"])
    assert (output / "modules.json").is_file() and (output / "model.safetensors").is_file()
    model = SentenceTransformer(str(output), device="cpu")
    query, right, wrong = model.encode(["which huge azure thing is found near the desert?",
                                        "it is big and blue, and it lives by the sand.", TEXTS[1]])
    assert query @ right / np.linalg.norm(query) / np.linalg.norm(right) > query @ wrong / np.linalg.norm(query) / np.linalg.norm(wrong)
