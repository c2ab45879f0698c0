"""Embedding data in-process: each shape detected by `format: auto` (and through
column_mapping), the loss chosen per shape and overridable, batches checked against the
loss, the settings validated by config/run_config.py, and the model family detected from its files."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from typed_config import typed
from tunelab.config.run_config import ConfigError, parse_config
from tunelab.orchestrator.prechecks import mlx_model_problem
from tunelab.worker.families.embedding import loss as embedding_loss
from tunelab.worker.context import RunSettingError
from tunelab.worker.families.embedding.family import EmbeddingFamily
from tunelab.worker.families.registry import family_spec
from tunelab.worker.data.sources import load_raw


def _raw(path, tmp_path, **config):
    return load_raw(typed({"local_datasets": [str(path)], "format": "auto", **config}), tmp_path / "cache")


@pytest.mark.parametrize(("data", "mapping", "shape", "columns"), [
    ("pairs", None, "pairs", ["anchor", "positive"]),
    ("triplets", None, "triplets", ["anchor", "positive", "negative"]),
    ("scored", None, "scored_pairs", ["sentence1", "sentence2", "score"]),
    ("labelled", None, "labelled_pairs", ["query", "document", "label"]),
    ("pairs_csv", {"anchor": "question", "positive": "answer"}, "pairs", ["anchor", "positive"]),
])
def test_each_shape_is_detected_and_handed_to_the_loss_in_order(embedding_assets, tmp_path, data, mapping, shape, columns):
    raw = _raw(getattr(embedding_assets, data), tmp_path, column_mapping=mapping or {})
    assert raw.format == shape
    family = EmbeddingFamily()
    prepared = family.prepare(typed({"batch_size": 4}), None, raw)
    assert prepared.train.column_names == columns
    assert family.loss == {"pairs": "mnrl", "triplets": "mnrl", "scored_pairs": "cosent", "labelled_pairs": "online_contrastive"}[shape]


def test_other_columns_beside_a_shape_are_dropped(tmp_path):
    data = tmp_path / "extra.jsonl"
    data.write_text("".join(json.dumps({"id": i, "anchor": f"q {i}", "positive": f"p {i}", "source": "web"}) + "\n" for i in range(6)))
    prepared = EmbeddingFamily().prepare(typed({"batch_size": 2}), None, _raw(data, tmp_path))
    assert prepared.train.column_names == ["anchor", "positive"]


def test_instruction_data_on_an_embedding_model_names_columns_and_shapes(tmp_path):
    data = tmp_path / "alpaca.jsonl"
    data.write_text(json.dumps({"instruction": "Add 2 and 3.", "output": "5"}) + "\n")
    with pytest.raises(RunSettingError) as caught:
        EmbeddingFamily().prepare(typed({"batch_size": 1}), None, _raw(data, tmp_path))
    assert caught.value.field == "format"
    message = caught.value.message
    assert "['instruction', 'output']" in message and "Add 2 and 3." in message  # the columns and a row
    assert "(anchor, positive) = pairs" in message and "column_mapping" in message


def test_unknown_columns_list_the_embedding_shapes_too(tmp_path):
    data = tmp_path / "odd.jsonl"
    data.write_text(json.dumps({"left": "a", "right": "b"}) + "\n")
    with pytest.raises(RunSettingError) as caught:
        _raw(data, tmp_path)
    assert "['left', 'right']" in caught.value.message and "(sentence1, sentence2, score) = scored_pairs" in caught.value.message


def test_a_row_without_text_is_named(tmp_path):
    data = tmp_path / "gap.jsonl"
    data.write_text("".join(json.dumps({"anchor": "q", "positive": p}) + "\n" for p in ("a", "b", "", "d")))
    with pytest.raises(RunSettingError, match="row 2 of the training data has no text in 'positive'"):
        EmbeddingFamily().prepare(typed({"batch_size": 2}), None, _raw(data, tmp_path))


@pytest.mark.parametrize(("rows", "words"), [
    ([{"sentence1": "a", "sentence2": "b", "score": s} for s in ("high", "low")], "row 0 of the training data has score 'high'"),
    ([{"query": "a", "document": "b", "label": v} for v in (1, 3, 0)], "row 1 of the training data has label 3"),
])
def test_a_score_or_label_that_is_not_one_is_named(tmp_path, rows, words):
    data = tmp_path / "graded.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RunSettingError, match=words):
        EmbeddingFamily().prepare(typed({"batch_size": 1}), None, _raw(data, tmp_path))


def test_pair_data_on_a_generative_model_says_what_to_do(demo_assets, embedding_assets, tmp_path):
    from tunelab.worker.data import prepare as data

    raw = _raw(embedding_assets.pairs, tmp_path)
    with pytest.raises(RunSettingError) as caught:
        data.prepare(typed({"model_name": str(demo_assets.model_dir)}), None, raw)
    assert caught.value.field == "model_name" and "embedding model" in caught.value.message


def test_loss_per_shape_cached_for_large_batches_and_overridable():
    assert embedding_loss.choose_loss("pairs", typed({"batch_size": 32})) == "mnrl"
    assert embedding_loss.choose_loss("triplets", typed({"batch_size": 64})) == "cached_mnrl"
    assert embedding_loss.choose_loss("scored_pairs", typed({"batch_size": 64})) == "cosent"
    assert embedding_loss.choose_loss("scored_pairs", typed({"embedding_loss": "cosine"})) == "cosine"
    assert embedding_loss.choose_loss("triplets", typed({"embedding_loss": "triplet"})) == "triplet"
    with pytest.raises(RunSettingError) as caught:
        embedding_loss.choose_loss("pairs", typed({"embedding_loss": "cosent"}))
    assert caught.value.field == "embedding_loss" and "'mnrl'" in caught.value.message


def test_in_batch_negatives_need_two_rows_per_batch():
    with pytest.raises(RunSettingError) as caught:
        embedding_loss.check_batch("mnrl", typed({"batch_size": 1}), train_rows=100)
    assert caught.value.field == "batch_size" and "per_device_train_batch_size" in caught.value.message
    embedding_loss.check_batch("cosent", typed({"batch_size": 1}), train_rows=100)  # a pairwise loss learns from one row
    with pytest.raises(RunSettingError, match="larger than the 10 training rows"):
        embedding_loss.check_batch("mnrl", typed({"batch_size": 16}), train_rows=10)


def test_the_loss_is_built_with_matryoshka_dims_within_the_embedding_size(embedding_assets):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss, MatryoshkaLoss

    model = SentenceTransformer(str(embedding_assets.model_dir), device="cpu")
    built = embedding_loss.build_loss("cached_mnrl", model, typed({"matryoshka_dims": [64, 32, 16]}))
    assert isinstance(built, MatryoshkaLoss) and isinstance(built.loss, CachedMultipleNegativesRankingLoss)
    with pytest.raises(RunSettingError, match="exceed the model's embedding size 64"):
        embedding_loss.build_loss("mnrl", model, typed({"matryoshka_dims": [128, 32]}))


def test_config_validates_the_embedding_settings(embedding_assets):
    base = {"model_name": str(embedding_assets.model_dir), "local_datasets": [str(embedding_assets.pairs)]}
    assert parse_config({**base, "matryoshka_dims": [16, 64, 32]}).matryoshka_dims == [64, 32, 16]
    for bad, words in (([64, 64], "twice"), ([0, 8], "no embedding size")):
        with pytest.raises(ConfigError) as caught:
            parse_config({**base, "matryoshka_dims": bad})
        assert caught.value.errors[0].field == "matryoshka_dims" and words in caught.value.errors[0].message
    with pytest.raises(ConfigError) as caught:
        parse_config({**base, "format": "scored_pairs", "embedding_loss": "mnrl"})
    assert caught.value.errors[0].field == "embedding_loss" and "cosent" in caught.value.errors[0].message
    with pytest.raises(ConfigError) as caught:
        parse_config({**base, "embedding_loss": "hinge"})
    assert caught.value.errors[0].field == "embedding_loss"


def test_the_family_is_detected_from_the_model_files(embedding_assets, demo_assets):
    assert family_spec(typed({"model_name": str(embedding_assets.model_dir)})).name == "embedding"  # sentence-transformers folder
    assert family_spec(typed({"model_name": str(embedding_assets.encoder_dir)})).name == "embedding"  # plain BERT: mean pooling
    assert family_spec(typed({"model_name": str(demo_assets.model_dir)})).name == "text"  # a causal LM


def test_the_mlx_backend_refuses_an_embedding_model_up_front(embedding_assets):
    problem = mlx_model_problem(str(embedding_assets.model_dir))
    assert problem and "embedding model" in problem and "backend=torch" in problem


@pytest.mark.parametrize(("data", "metric"), [("pairs", "cosine_ndcg@10"), ("triplets", "cosine_mrr@10"),
                                              ("scored", "spearman_cosine"), ("labelled", "cosine_ap")])
def test_each_shape_gets_its_evaluator(embedding_assets, tmp_path, data, metric):
    from sentence_transformers import SentenceTransformer

    from tunelab.worker.families.embedding.eval import HEADLINE_METRIC, build_evaluator

    raw = _raw(getattr(embedding_assets, data), tmp_path)
    rows = EmbeddingFamily().prepare(typed({"batch_size": 4}), None, raw).train.select(range(24))
    evaluator = build_evaluator(raw.format, rows, batch_size=8)
    scores = evaluator(SentenceTransformer(str(embedding_assets.model_dir), device="cpu"))
    assert 0.0 <= scores[metric] <= 1.0 or metric == "spearman_cosine"
    assert f"eval_{metric}" == HEADLINE_METRIC[raw.format] or raw.format == "triplets"


def test_the_retrieval_task_keeps_each_text_once():
    from tunelab.worker.families.embedding.eval import retrieval_task

    queries, corpus, relevant = retrieval_task(["q1", "q2", "q1"], ["p1", "p1", "p3"], ["p3", "n2", "n3"])
    assert sorted(queries.values()) == ["q1", "q2"] and sorted(corpus.values()) == ["n2", "n3", "p1", "p3"]
    by_text = {text: cid for cid, text in corpus.items()}
    q1 = next(qid for qid, text in queries.items() if text == "q1")
    assert relevant[q1] == {by_text["p1"], by_text["p3"]}


def test_check_dataset_shows_each_pair_as_its_columns(embedding_assets, tmp_path):
    from tunelab.worker.preview.child import build_preview

    preview = build_preview(typed({"local_datasets": [str(embedding_assets.triplets)], "format": "auto"}), 2,
                            str(embedding_assets.model_dir), tmp_path / "cache")
    assert preview["format"] == "triplets" and preview["rendered_with"] == "raw_text" and preview["row_count"] == 216
    lines = preview["rows"][0]["text"].splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == ["anchor", "positive", "negative"]
    assert lines[0].startswith("anchor: which ")
