"""Telling an embedding model from a generative one, from its own files, never its name.

A model is an embedding model when its folder is a sentence-transformers model
(`modules.json` or `config_sentence_transformers.json` next to its config: BGE, GTE,
E5, all-MiniLM, and decoder-based embedders such as Qwen3-Embedding or EmbeddingGemma
all ship these), or when it is a plain encoder: its model type has a base `AutoModel`
class, it is no decoder and no encoder-decoder, and its checkpoint carries no causal-LM
head. (BERT, RoBERTa and XLM-R also have causal-LM head classes, so "its type maps to a
causal LM" cannot rule them out; a masked-LM or bare-encoder checkpoint is an encoder.)
sentence-transformers wraps a plain encoder with mean pooling when it loads one.
`folder_is_sentence_transformers` is transformers-free, for the parent's start checks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig

# The files a sentence-transformers folder has that no plain transformers model has.
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "config_sentence_transformers.json")
# The mlx backend's answer for such a model (mlx-embeddings 0.1.0 is on the index, but it
# runs embedders; it has no training loop, losses or trainer to fine-tune them with).
MLX_REFUSAL = ("is an embedding model, and the mlx backend trains generative text models only (no maintained "
               "MLX package fine-tunes embedding models here); use backend=torch")
_TRUE = {"1", "ON", "YES", "TRUE"}


def folder_is_sentence_transformers(folder: str | Path) -> bool:
    """Whether a local model folder holds sentence-transformers' own files."""
    root = Path(folder).expanduser()
    return any((root / name).is_file() for name in SENTENCE_TRANSFORMERS_FILES)


def is_embedding_model(config: WorkerConfig) -> bool:
    """Whether the run's `model_name` is an embedding model (reads only its small files)."""
    if _has_sentence_transformers_files(config):
        return True
    from transformers import AutoConfig

    try:
        model_config = AutoConfig.from_pretrained(config.model_name, token=config.hf_token or None,
                                                  trust_remote_code=config.trust_remote_code)
    except (OSError, ValueError, KeyError):
        return False  # the model load reports the real problem, in its own words
    return is_encoder_config(model_config)


def is_encoder_config(model_config: Any) -> bool:
    """A plain encoder: see the module docstring for why each condition is there."""
    from transformers.models.auto import modeling_auto as auto

    model_type = getattr(model_config, "model_type", None)
    if model_type not in auto.MODEL_MAPPING_NAMES or model_type in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return False
    if getattr(model_config, "is_decoder", False) or getattr(model_config, "is_encoder_decoder", False):
        return False
    causal_heads = set(auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    if any(name in causal_heads for name in getattr(model_config, "architectures", None) or []):
        return False
    return model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES or model_type not in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def _has_sentence_transformers_files(config: WorkerConfig) -> bool:
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
