"""The embedding demo through the real orchestrator, worker and store: the tiny encoder's
retrieval quality on held-out pairs rises within a short full fine-tune, each eval lands
in the store, and the output folder loads with SentenceTransformer (and is not exported
as a generative model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunelab import paths
from tunelab.embedding_demo import embedding_demo_config, eval_history
from tunelab.export.plan import ExportInputError, plan_export
from tunelab.orchestrator import Orchestrator
from tunelab.store import Store

pytestmark = pytest.mark.slow
STEPS = 40
RUN_WAIT_S = 300


def test_embedding_demo_learns_to_retrieve(embedding_assets, home):
    with Store(paths.db_path()) as store:
        orchestrator = Orchestrator(store)
        try:
            run_id = orchestrator.start(embedding_demo_config(embedding_assets, steps=STEPS))
            assert orchestrator.wait_idle(RUN_WAIT_S), "the run did not finish"
            row = store.get_run(run_id)
            metrics = store.get_metrics(run_id)
        finally:
            orchestrator.shutdown()
    assert row["status"] == "completed", row["error_message"]
    # The folder already is what a user loads; the generative-model exports say so.
    with pytest.raises(ExportInputError, match="already is a sentence-transformers folder"):
        plan_export(row, run_id, "merged", None, None)
    assert [m["step"] for m in metrics if m["loss"] is not None] == list(range(1, STEPS + 1))
    assert [m["step"] for m in metrics if m["eval_loss"] is not None] == [10, 20, 30, 40]
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
                                        "it is big and blue, and it lives by the sand.",
                                        "it is small and red, and it lives by the sea."])
    assert query @ right / (sum(query**2) * sum(right**2)) ** 0.5 > query @ wrong / (sum(query**2) * sum(wrong**2)) ** 0.5
