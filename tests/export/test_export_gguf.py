"""`tunelab export --format gguf`: the file read back with gguf's own reader — metadata,
tokenizer, tensor names and shapes, values equal to the merged weights, and q/k laid out
so that llama.cpp's rotary embedding gives the same attention scores as transformers'."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file
from transformers import AutoTokenizer

from export_helpers import run_cli

pytestmark = pytest.mark.slow
N_LAYERS, N_HEADS, HEAD_DIM, ROPE_THETA = 2, 4, 32, 10000.0
PER_BLOCK = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def hf_names() -> dict[str, str]:
    """llama.cpp's tensor name -> the Hugging Face Llama name it holds."""
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    for block in range(N_LAYERS):
        for short, long in PER_BLOCK.items():
            names[f"blk.{block}.{short}.weight"] = f"model.layers.{block}.{long}.weight"
    return names


@pytest.fixture(scope="module")
def exported(lora_run) -> tuple[gguf.GGUFReader, dict[str, np.ndarray], Path]:
    """The run exported as GGUF (default 16-bit) and as merged weights, the reference."""
    merged_dir = lora_run.outputs_root / "gguf-reference-merged"
    for args in (["--format", "gguf"], ["--format", "merged", "--dest", merged_dir]):
        result = run_cli(["export", lora_run.run_id, *args], lora_run.home)
        assert result.returncode == 0, result.stdout + result.stderr
    gguf_file = lora_run.output_dir / "export-gguf" / "model-f16.gguf"
    return gguf.GGUFReader(gguf_file), load_file(merged_dir / "model.safetensors"), merged_dir


def field(reader: gguf.GGUFReader, key: str):
    return reader.fields[key].contents()


def tensors(reader: gguf.GGUFReader) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in reader.tensors}


def test_metadata_describes_the_llama_model(exported):
    reader, _, merged_dir = exported
    config = json.loads((merged_dir / "config.json").read_text())
    assert field(reader, "general.architecture") == "llama"
    expected = {"llama.context_length": config["max_position_embeddings"], "llama.embedding_length": config["hidden_size"],
                "llama.block_count": N_LAYERS, "llama.feed_forward_length": config["intermediate_size"],
                "llama.attention.head_count": N_HEADS, "llama.attention.head_count_kv": config["num_key_value_heads"],
                "llama.rope.dimension_count": HEAD_DIM, "general.file_type": int(gguf.LlamaFileType.MOSTLY_F16)}
    assert {key: field(reader, key) for key in expected} == expected
    assert field(reader, "llama.rope.freq_base") == pytest.approx(ROPE_THETA)
    assert field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(config["rms_norm_eps"])


def test_tokenizer_is_the_runs_byte_level_bpe(exported):
    reader, _, merged_dir = exported
    tokenizer = AutoTokenizer.from_pretrained(merged_dir)
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert field(reader, "tokenizer.ggml.model") == "gpt2"
    assert field(reader, "tokenizer.ggml.pre") == "gpt-2"  # a plain ByteLevel pre-tokenizer splits as GPT-2 does
    assert tokens == tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    types = field(reader, "tokenizer.ggml.token_type")
    assert types[tokenizer.bos_token_id] == gguf.TokenType.CONTROL
    assert types[tokenizer.convert_tokens_to_ids("Ġcapital")] == gguf.TokenType.NORMAL
    merges = json.loads((merged_dir / "tokenizer.json").read_text())["model"]["merges"]
    assert field(reader, "tokenizer.ggml.merges") == [" ".join(m) if isinstance(m, list) else m for m in merges]
    assert field(reader, "tokenizer.ggml.bos_token_id") == tokenizer.bos_token_id
    assert field(reader, "tokenizer.ggml.eos_token_id") == tokenizer.eos_token_id
    assert field(reader, "tokenizer.ggml.padding_token_id") == tokenizer.pad_token_id
    assert field(reader, "tokenizer.chat_template") == tokenizer.chat_template


def test_tensors_carry_llama_cpp_names_shapes_and_types(exported):
    reader, merged, _ = exported
    found = tensors(reader)
    assert set(found) == set(hf_names())
    for name, hf_name in hf_names().items():
        tensor = found[name]
        assert tensor.data.shape == merged[hf_name].shape, name
        assert list(tensor.shape) == list(reversed(merged[hf_name].shape)), name  # GGUF lists dims fastest first
        wanted = gguf.GGMLQuantizationType.F16 if tensor.data.ndim == 2 else gguf.GGMLQuantizationType.F32
        assert tensor.tensor_type == wanted, name


def test_weights_equal_the_merged_weights(exported):
    reader, merged, _ = exported
    found = tensors(reader)
    for name in ("blk.1.ffn_down.weight", "token_embd.weight", "blk.0.attn_v.weight", "output.weight"):
        np.testing.assert_array_equal(found[name].data, merged[hf_names()[name]], err_msg=name)
    np.testing.assert_array_equal(found["output_norm.weight"].data, merged["model.norm.weight"].astype(np.float32))


def _hf_rope(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """transformers' Llama rotary embedding: dimension i pairs with i + d/2."""
    half = x.shape[-1] // 2
    angles = positions[:, None, None] * ROPE_THETA ** (-np.arange(half) / half)
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))
    rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def _llama_cpp_rope(x: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """llama.cpp's "normal" rotary embedding for llama: dimension 2i pairs with 2i + 1."""
    half = x.shape[-1] // 2
    angles = positions[:, None, None] * ROPE_THETA ** (-np.arange(half) / half)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * np.cos(angles) - odd * np.sin(angles)
    out[..., 1::2] = even * np.sin(angles) + odd * np.cos(angles)
    return out


def _scores(hidden: np.ndarray, wq: np.ndarray, wk: np.ndarray, rope) -> np.ndarray:
    positions = np.arange(hidden.shape[0], dtype=np.float64)
    q = rope((hidden @ wq.T).reshape(len(hidden), N_HEADS, HEAD_DIM), positions)
    k = rope((hidden @ wk.T).reshape(len(hidden), N_HEADS, HEAD_DIM), positions)
    return np.einsum("mhd,nhd->hmn", q, k)


def test_q_and_k_are_reordered_for_llama_cpps_rotary_layout(exported):
    reader, merged, _ = exported
    found = tensors(reader)
    hidden = np.random.default_rng(0).normal(scale=10.0, size=(7, 128))
    for block in range(N_LAYERS):
        hf_q, hf_k = (merged[f"model.layers.{block}.self_attn.{p}_proj.weight"].astype(np.float64) for p in "qk")
        gg_q, gg_k = (found[f"blk.{block}.attn_{p}.weight"].data.astype(np.float64) for p in "qk")
        expected = _scores(hidden, hf_q, hf_k, _hf_rope)
        np.testing.assert_allclose(_scores(hidden, gg_q, gg_k, _llama_cpp_rope), expected, rtol=1e-9, atol=1e-9)
        # Without the reordering llama.cpp would compute different scores.
        assert np.abs(_scores(hidden, hf_q, hf_k, _llama_cpp_rope) - expected).max() > 1e-3 * np.abs(expected).max()


def test_bfloat16_gguf_holds_bfloat16_matrices(lora_run, exported):
    _, merged, _ = exported
    dest = lora_run.outputs_root / "gguf-bf16"
    result = run_cli(["export", lora_run.run_id, "--format", "gguf", "--dtype", "bfloat16", "--dest", dest], lora_run.home)
    assert result.returncode == 0, result.stdout + result.stderr
    reader = gguf.GGUFReader(dest / "model-bf16.gguf")
    assert field(reader, "general.file_type") == int(gguf.LlamaFileType.MOSTLY_BF16)
    down = tensors(reader)["blk.0.ffn_down.weight"]
    assert down.tensor_type == gguf.GGMLQuantizationType.BF16
    values = gguf.quants.dequantize(down.data, down.tensor_type)
    reference = merged["model.layers.0.mlp.down_proj.weight"].astype(np.float32)
    assert values.shape == reference.shape
    # Both round the same float32 merge once: bfloat16 keeps 8 significant bits, float16 11.
    np.testing.assert_allclose(values, reference, rtol=2 ** -8, atol=1e-6)
