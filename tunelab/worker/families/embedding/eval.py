"""The evaluator an embedding run reports at each eval, chosen by the data shape.

  pairs, triplets  retrieval (InformationRetrievalEvaluator): each held-out anchor is a
                   query over a corpus of every held-out positive (and negative); its own
                   positive is the relevant one. Reports nDCG@10, MRR@10, MAP@10,
                   accuracy/recall@1/5/10 under `eval_cosine_*` keys.
  scored_pairs     EmbeddingSimilarityEvaluator: Spearman (and Pearson) correlation between
                   the cosine similarity and the gold score (`eval_spearman_cosine`).
  labelled_pairs   BinaryClassificationEvaluator: accuracy, F1 and average precision of
                   telling relevant from irrelevant pairs by cosine similarity.
sentence-transformers' trainer runs the evaluator after the eval loss and puts its
metrics into the same log record, so they reach the Trainer's logs (and every callback
that reads them) with the eval loss.
"""

from __future__ import annotations

from typing import Any

# The metric each shape's evaluator leads with, as it appears in the Trainer's logs.
HEADLINE_METRIC = {"pairs": "eval_cosine_ndcg@10", "triplets": "eval_cosine_ndcg@10",
                   "scored_pairs": "eval_spearman_cosine", "labelled_pairs": "eval_cosine_ap"}
RECALL_AT = [1, 5, 10]


def build_evaluator(fmt: str, eval_rows: Any, batch_size: int) -> Any:
    from sentence_transformers.sentence_transformer import evaluation

    columns = {name: eval_rows[name] for name in eval_rows.column_names}
    if fmt in ("pairs", "triplets"):
        queries, corpus, relevant = retrieval_task(columns["anchor"], columns["positive"], columns.get("negative"))
        return evaluation.InformationRetrievalEvaluator(
            queries, corpus, relevant, mrr_at_k=[10], ndcg_at_k=[10], accuracy_at_k=RECALL_AT,
            precision_recall_at_k=RECALL_AT, map_at_k=[10], batch_size=batch_size, show_progress_bar=False)
    if fmt == "scored_pairs":
        return evaluation.EmbeddingSimilarityEvaluator(columns["sentence1"], columns["sentence2"], [float(s) for s in columns["score"]],
                                                       batch_size=batch_size, similarity_fn_names=["cosine"])
    return evaluation.BinaryClassificationEvaluator(columns["query"], columns["document"], [int(label) for label in columns["label"]],
                                                    batch_size=batch_size, similarity_fn_names=["cosine"])


def retrieval_task(anchors: list[str], positives: list[str], negatives: list[str] | None) -> tuple[dict, dict, dict]:
    """(queries, corpus, relevant docs) with each distinct text once: the same passage
    answering two queries is one corpus entry relevant to both."""
    corpus_ids: dict[str, str] = {}
    for text in [*positives, *(negatives or [])]:
        corpus_ids.setdefault(text, f"d{len(corpus_ids)}")
    query_ids: dict[str, str] = {}
    relevant: dict[str, set[str]] = {}
    for anchor, positive in zip(anchors, positives):
        qid = query_ids.setdefault(anchor, f"q{len(query_ids)}")
        relevant.setdefault(qid, set()).add(corpus_ids[positive])
    return ({qid: text for text, qid in query_ids.items()}, {cid: text for text, cid in corpus_ids.items()}, relevant)
