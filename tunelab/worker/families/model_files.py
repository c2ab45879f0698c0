"""What the worker reads of a run's model to tell its family: the child's `ModelFiles`.

The family specs (`tunelab/families/`) hold the tests; this module gives them the model's
own files as the child reaches them, wherever the model lives (a folder, the hub cache or
the hub): config.json as on disk (the text-to-speech marker is no transformers field),
transformers' config object (the tests that read transformers' mappings), the tokenizer.json
(read only for a causal LM's type, the only ones that carry Orpheus's audio range) and
sentence-transformers' own files. A file that cannot be read counts as absent: the model
load reports the real problem, in its own words.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunelab.families import ModelFiles
from tunelab.families.embedding import SENTENCE_TRANSFORMERS_FILES, folder_is_sentence_transformers
from tunelab.families.tts import CAUSAL_TYPES
from tunelab.worker.hub_config import model_config_or_none

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

_TRUE = {"1", "ON", "YES", "TRUE"}


def model_files(config: WorkerConfig, transformers: bool = True) -> ModelFiles:
    """The run's model's files for detection; `transformers=False` leaves transformers' config
    unread (for a test on the raw files alone)."""
    raw = model_config_dict(config)

    def tokenizer_json() -> str | None:
        return hub_file(config, "tokenizer.json") if raw.get("model_type") in CAUSAL_TYPES else None

    return ModelFiles(config=raw, transformers=transformers, model_config=model_config_or_none(config) if transformers else None,
                      tokenizer_json=tokenizer_json, sentence_transformers=lambda: has_sentence_transformers_files(config))


def hub_file(config: WorkerConfig, name: str) -> str | None:
    from transformers.utils import cached_file

    try:
        return cached_file(config.model_name, name, token=config.hf_token or None,
                           _raise_exceptions_for_missing_entries=False, _raise_exceptions_for_connection_errors=False)
    except (OSError, ValueError):
        return None  # the model load reports the real problem, in its own words


def model_config_dict(config: WorkerConfig) -> dict[str, Any]:
    """The model's config.json as it is on disk (the marker is not a transformers field)."""
    found = hub_file(config, "config.json")
    try:
        loaded = json.loads(Path(found).read_text()) if found else {}
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def has_sentence_transformers_files(config: WorkerConfig) -> bool:
    """Whether the model's folder, its hub cache or (online) its hub repo has sentence-transformers' files."""
    name = config.model_name
    if Path(name).expanduser().is_dir():
        return folder_is_sentence_transformers(name)
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    for file in SENTENCE_TRANSFORMERS_FILES:
        try:
            if isinstance(try_to_load_from_cache(name, file), str):
                return True
        except Exception:  # a name that is no valid repo id is simply not cached
            return False
    if any(os.environ.get(flag, "").upper() in _TRUE for flag in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return False
    try:
        hf_hub_download(name, SENTENCE_TRANSFORMERS_FILES[0], token=config.hf_token or None)
    except Exception:  # not there (a plain model), or the hub is unreachable: the model load says which
        return False
    return True
