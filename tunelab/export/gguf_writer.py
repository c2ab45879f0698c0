"""Writing a Llama-architecture model as one GGUF file (llama.cpp's format) with `gguf`.

Three parts go in: the hyper-parameters as `llama.*` metadata, the tokenizer (see
`gguf_vocab`), and every weight under llama.cpp's tensor name (`token_embd`,
`blk.N.attn_q`, ...; the names come from the `gguf` package's own map). Matrices are
stored in the chosen float type and 1-D weights (norms, biases) in F32, as llama.cpp's
converter does.

Why q and k are reordered: Hugging Face's Llama applies rotary embeddings to the two
halves of each head (dimension i pairs with i + d/2), llama.cpp to neighbouring pairs
(2i with 2i+1). Reordering the output rows of q_proj and k_proj per head turns one
layout into the other, so attention scores come out the same.
Plain numpy in: no torch, no transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

import gguf
import numpy as np

from tunelab.export.gguf_vocab import GGUFVocab
from tunelab.export.plan import ExportInputError

LLAMA_ARCHITECTURES = ("LlamaForCausalLM",)
FILE_TYPES = {
    "float16": (gguf.LlamaFileType.MOSTLY_F16, gguf.GGMLQuantizationType.F16),
    "bfloat16": (gguf.LlamaFileType.MOSTLY_BF16, gguf.GGMLQuantizationType.BF16),
    "float32": (gguf.LlamaFileType.ALL_F32, gguf.GGMLQuantizationType.F32),
}
FILE_SUFFIXES = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def gguf_file_name(dtype: str) -> str:
    return f"model-{FILE_SUFFIXES[dtype]}.gguf"


def check_llama_config(config: dict[str, Any]) -> None:
    """Refuse, before any weights are loaded, a model this writer cannot express."""
    architectures = config.get("architectures") or []
    if config.get("model_type") != "llama" or (architectures and not set(architectures) & set(LLAMA_ARCHITECTURES)):
        found = ", ".join(architectures) or config.get("model_type") or "unknown"
        raise ExportInputError("format", f"gguf export supports Llama-architecture models only and this run's model is {found}; "
                                         "export format merged and convert that folder with llama.cpp's convert_hf_to_gguf.py")
    rope_type = _rope_settings(config)["rope_type"]
    if rope_type not in ("default", "linear"):
        raise ExportInputError("format", f"gguf export does not handle rope scaling of type {rope_type!r}; export format merged "
                                         "and convert that folder with llama.cpp's convert_hf_to_gguf.py")


def hf_to_gguf_rope_order(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Reorder q/k projection rows from HF's half-split rotary layout to llama.cpp's
    interleaved one: within each head, row i of the first half and row i of the second
    half become rows 2i and 2i+1. Works for weights (2-D) and biases (1-D)."""
    head_dim = weight.shape[0] // n_heads
    return weight.reshape(n_heads, 2, head_dim // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def write_llama_gguf(path: Path, config: dict[str, Any], tensors: Iterable[tuple[str, np.ndarray]], vocab: GGUFVocab,
                     dtype: str, name: str) -> list[str]:
    """Write `path` from a HF Llama config, (HF name, float32 array) pairs and the vocab;
    returns the GGUF tensor names in file order."""
    check_llama_config(config)
    file_type, matrix_type = FILE_TYPES[dtype]
    writer = gguf.GGUFWriter(path, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA], use_temp_file=True)
    _add_hyper_parameters(writer, config, name, file_type, n_vocab=len(vocab.tokens))
    _add_tokenizer(writer, vocab)
    written = []
    for gguf_name, data in _llama_tensors(tensors, config):
        kind = matrix_type if data.ndim > 1 else gguf.GGMLQuantizationType.F32
        writer.add_tensor(gguf_name, gguf.quants.quantize(data.astype(np.float32, copy=False), kind), raw_dtype=kind)
        written.append(gguf_name)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written


def _head_counts(config: dict[str, Any]) -> tuple[int, int, int]:
    n_heads = int(config["num_attention_heads"])
    n_kv_heads = int(config.get("num_key_value_heads") or n_heads)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // n_heads)
    return n_heads, n_kv_heads, head_dim


def _rope_settings(config: dict[str, Any]) -> dict[str, Any]:
    # transformers 5 keeps theta and scaling together in rope_parameters; older configs
    # have rope_theta and rope_scaling side by side.
    params = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
    return {
        "rope_type": params.get("rope_type") or params.get("type") or "default",
        "rope_theta": float(params.get("rope_theta") or config.get("rope_theta") or 10000.0),
        "factor": params.get("factor"),
    }


def _add_hyper_parameters(writer: gguf.GGUFWriter, config: dict[str, Any], name: str, file_type: int, n_vocab: int) -> None:
    n_heads, n_kv_heads, head_dim = _head_counts(config)
    rope = _rope_settings(config)
    writer.add_name(name)
    writer.add_vocab_size(n_vocab)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv_heads)
    if head_dim * n_heads != int(config["hidden_size"]):
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope["rope_theta"])
    if rope["rope_type"] == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_file_type(file_type)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _add_tokenizer(writer: gguf.GGUFWriter, vocab: GGUFVocab) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre_tokenizer)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.types)
    vocab.special.add_to_gguf(writer, quiet=True)


def _llama_tensors(tensors: Iterable[tuple[str, np.ndarray]], config: dict[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    n_heads, n_kv_heads, _ = _head_counts(config)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, int(config["num_hidden_layers"]))
    tied = bool(config.get("tie_word_embeddings"))
    for hf_name, data in tensors:
        if tied and hf_name == "lm_head.weight":
            continue  # llama.cpp reuses token_embd when the file has no output weight
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ExportInputError("format", f"the model has a weight {hf_name!r} that a llama GGUF has no place for; export format "
                                             "merged and convert that folder with llama.cpp's convert_hf_to_gguf.py")
        if hf_name.endswith(("q_proj.weight", "q_proj.bias")):
            data = hf_to_gguf_rope_order(data, n_heads)
        elif hf_name.endswith(("k_proj.weight", "k_proj.bias")):
            data = hf_to_gguf_rope_order(data, n_kv_heads)
        yield gguf_name, data
