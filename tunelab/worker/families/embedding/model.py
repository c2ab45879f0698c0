"""Telling an embedding model from a generative one, from its own files, never its name.

The tests (sentence-transformers' own files, or a plain encoder by transformers' mappings)
are the family spec's, `tunelab/families/embedding.py`; the files are read as the worker
reads them (`model_files`: the folder, the hub cache, or the hub).
sentence-transformers wraps a plain encoder with mean pooling when it loads one.
"""

from __future__ import annotations

from typing import Any

from tunelab.families import embedding
from tunelab.worker.families.model_files import model_files


def is_embedding_model(config: dict[str, Any]) -> bool:
    """Whether the run's `model_name` is an embedding model (reads only its small files)."""
    return embedding.SPEC.matches(model_files(config))
