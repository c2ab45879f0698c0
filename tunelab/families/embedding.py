"""The embedding family: told from the model's own files, never its name.

A model is an embedding model when its folder is a sentence-transformers model
(`modules.json` or `config_sentence_transformers.json` next to its config: BGE, GTE, E5,
all-MiniLM, and decoder-based embedders such as Qwen3-Embedding or EmbeddingGemma all ship
these), or when it is a plain encoder: its model type has a base `AutoModel` class, it is no
decoder and no encoder-decoder, and its checkpoint carries no causal-LM head. (BERT, RoBERTa
and XLM-R also have causal-LM head classes, so "its type maps to a causal LM" cannot rule
them out; a masked-LM or bare-encoder checkpoint is an encoder.) The plain-encoder test reads
transformers' mappings, so only a child with a loaded config asks it; the parent knows an
embedding model by its sentence-transformers files. Its runs answer with vectors: no chat,
no evaluation of text answers, no GGUF.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tunelab.families.spec import FamilySpec, ModelFiles

# The files a sentence-transformers folder has that no plain transformers model has.
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "config_sentence_transformers.json")
# The mlx backend's answer for such a model (mlx-embeddings 0.1.0 is on the index, but it
# runs embedders; it has no training loop, losses or trainer to fine-tune them with).
MLX_REFUSAL = ("is an embedding model, and the mlx backend trains generative text models only (no maintained "
               "MLX package fine-tunes embedding models here); use backend=torch")


def folder_is_sentence_transformers(folder: str | Path) -> bool:
    """Whether a local model folder holds sentence-transformers' own files."""
    root = Path(folder).expanduser()
    return any((root / name).is_file() for name in SENTENCE_TRANSFORMERS_FILES)


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


def _matches(files: ModelFiles) -> bool:
    if files.sentence_transformers():
        return True
    return files.transformers and files.model_config is not None and is_encoder_config(files.model_config)


SPEC = FamilySpec(
    name="embedding", modality="embedding", words="an embedding model", matches=_matches, auto_class="AutoModel",
    backends=("torch",), refusal=MLX_REFUSAL, gguf=False, serves="embed", evaluates=False,
    chat_refusal=("run {run_id} trained an embedding model, which answers with vectors, not text; load its "
                  "folder with sentence-transformers (SentenceTransformer(<folder>)) to embed with it"),
    page_no_chat=("An embedding model answers with vectors, not text, so it has no chat: load its folder with "
                  "sentence-transformers (SentenceTransformer(folder)) to embed with it."),
    page_no_eval="Evaluate measures text answers; an embedding run's retrieval scores are in its training metrics.",
    demo="embedding", demo_builder="tunelab.demos.embedding", settings=("embedding_loss", "matryoshka_dims"))
