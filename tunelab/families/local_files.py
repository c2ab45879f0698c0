"""A model's files as a parent process reads them, for `families.detect`: never downloaded.

The parent (the start checks, the speak request) tells a model's family before any child
loads it: config.json from the local folder or the hub cache (an unreadable one read as
none: the worker reports it in its own words), the tokenizer.json beside it and a local
folder's sentence-transformers files. Torch-free; `huggingface_hub` only to look in its cache.
"""

from __future__ import annotations

import json
from pathlib import Path

from tunelab.families.embedding import folder_is_sentence_transformers
from tunelab.families.spec import ModelFiles


def local_files(name: str) -> ModelFiles:
    """The model's files as the parent reads them: never downloaded, an unreadable config.json read as none."""
    path = Path(name).expanduser() / "config.json"
    found = str(path) if path.is_file() else _cached_config(name)
    try:
        config = json.loads(Path(found).read_text()) if found else {}
    except (OSError, ValueError):
        config = {}  # the worker reports an unreadable config in its own words
    tokenizer = Path(found).with_name("tokenizer.json") if found else None
    return ModelFiles(config=config if isinstance(config, dict) else {},
                      tokenizer_json=lambda: tokenizer if tokenizer and tokenizer.is_file() else None,
                      sentence_transformers=lambda: folder_is_sentence_transformers(name))


def _cached_config(repo_id: str) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # a name that is no valid repo id is simply not cached
        return None
    return found if isinstance(found, str) else None
