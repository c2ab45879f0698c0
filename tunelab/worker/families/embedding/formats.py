"""The data shapes an embedding model trains on, recognised by their columns.

  pairs           anchor, positive             (query and a passage that answers it)
  triplets        anchor, positive, negative   (plus a passage that does not)
  scored_pairs    sentence1, sentence2, score  (similarity, e.g. 0..1 or 0..5 as in STS)
  labelled_pairs  query, document, label       (1 = relevant, 0 = not)
Columns are matched after `column_mapping`, so a dataset with other names maps them
(e.g. {anchor: question, positive: answer}). The column order here is the order in
which sentence-transformers' trainer hands the texts to the loss; the score or label
column is its label. Torch-free (`formats.detect_format` asks this module first).
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.context import RunSettingError

# Longest first: a triplet dataset also has the pair columns.
EMBEDDING_FORMATS: dict[str, tuple[str, ...]] = {
    "triplets": ("anchor", "positive", "negative"),
    "pairs": ("anchor", "positive"),
    "scored_pairs": ("sentence1", "sentence2", "score"),
    "labelled_pairs": ("query", "document", "label"),
}
EMBEDDING_COLUMNS = tuple(dict.fromkeys(c for columns in EMBEDDING_FORMATS.values() for c in columns))
LABEL_COLUMNS = ("score", "label")
# The shapes whose loss takes its negatives from the other rows of a batch.
IN_BATCH_FORMATS = ("pairs", "triplets")
EXAMPLE_ROW = {"pairs": {"anchor": "how tall is Everest?", "positive": "Mount Everest is 8,849 m high."},
               "scored_pairs": {"sentence1": "A man plays guitar.", "sentence2": "Someone plays an instrument.", "score": 0.8}}


def detect_embedding_format(columns: list[str]) -> str | None:
    """The embedding shape these columns have, or None."""
    return next((name for name, needed in EMBEDDING_FORMATS.items() if all(c in columns for c in needed)), None)


def missing_columns(fmt: str, columns: list[str]) -> list[str]:
    return [c for c in EMBEDDING_FORMATS[fmt] if c not in columns]


def describe_shapes() -> str:
    """The shapes in words, for error messages."""
    return "; ".join(f"({', '.join(needed)}) = {name}" for name, needed in EMBEDDING_FORMATS.items())


def not_embedding_data(fmt: str, columns: list[str], sample: dict[str, Any] | None) -> RunSettingError:
    """The error for an embedding model given data of another shape: the columns seen,
    one row, the shapes it can train on and how to map columns onto them."""
    row = f"; the first row is {_short(sample)}" if sample else ""
    return RunSettingError(
        "format",
        f"an embedding model trains on pairs, triplets or scored pairs, but the data is {fmt} with columns "
        f"{columns}{row}. Expected columns: {describe_shapes()}. Map yours with column_mapping, e.g. "
        "{anchor: question, positive: answer}, or use a generative model for this data",
    )


def _short(row: dict[str, Any]) -> str:
    text = repr({k: (v[:40] + "…" if isinstance(v, str) and len(v) > 40 else v) for k, v in row.items()})
    return text if len(text) <= 300 else text[:300] + "…"
