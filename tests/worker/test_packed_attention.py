"""Per-example attention for packed batches on CPU (`tunelab.worker.families.text.packed_attention`).

Packed batches are built by TRL's own packing and collator, exactly as in a packed run.
The attention must keep examples apart (each example's loss equals its loss computed
alone), honour a sliding window shorter than the examples (Mistral/Qwen-style layers),
agree with transformers' sdpa on ordinary padded batches, and be what a packed CPU run
loads — and nothing else.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
)
from trl.data_utils import pack_dataset  # noqa: E402
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling  # noqa: E402

from typed_config import typed
from tunelab.worker.families.text import packed_attention  # noqa: E402
from tunelab.worker.model_setup import DeviceSettings, attention_for, padding_free_batches  # noqa: E402

CPU = DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)
BOUNDARY_KEYS = ("position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")


def _rows(count: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 40, (count,), generator=generator).tolist()
    return [torch.randint(5, 300, (n,), generator=generator).tolist() for n in lengths]


def _packed_batch(rows: list[list[int]], max_length: int) -> tuple[dict, list[list[int]]]:
    """A padding-free batch of two packed rows, and its examples in packed order."""
    packed = pack_dataset(Dataset.from_dict({"input_ids": rows}), max_length, strategy="bfd")
    chosen = [packed[i] for i in range(2)]
    examples = []
    for row in chosen:
        start = 0
        for length in row["seq_lengths"]:
            examples.append(row["input_ids"][start:start + length])
            start += length
    return DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(chosen), examples


def _per_example_losses(model, batch: dict, bounds_from: dict) -> list[float]:
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits = model(**inputs, use_cache=False).logits[0]
    token_losses = F.cross_entropy(logits[:-1], batch["input_ids"][0, 1:], reduction="none")
    starts = (bounds_from["position_ids"][0] == 0).nonzero().flatten().tolist() + [logits.shape[0]]
    return [token_losses[start:end - 1].mean().item() for start, end in zip(starts[:-1], starts[1:])]


def _alone(model, example: list[int]) -> float:
    logits = model(input_ids=torch.tensor([example]), use_cache=False).logits[0]
    return F.cross_entropy(logits[:-1], torch.tensor(example[1:])).item()


@pytest.fixture(scope="module")
def gqa_model_dir(tmp_path_factory):
    """A tiny random Llama with grouped-query attention (2 key/value heads for 4 heads)."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=640, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    folder = tmp_path_factory.mktemp("gqa-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def sliding_model_dir(tmp_path_factory):
    """A tiny random Mistral whose sliding window (6 tokens) is shorter than most examples."""
    torch.manual_seed(0)
    config = MistralConfig(vocab_size=640, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                           sliding_window=SLIDING_WINDOW)
    folder = tmp_path_factory.mktemp("sliding-mistral")
    MistralForCausalLM(config).save_pretrained(folder)
    return folder


SLIDING_WINDOW = 6


@pytest.mark.parametrize("which", ["demo", "gqa"])
def test_packed_examples_never_attend_to_each_other(which, demo_assets, gqa_model_dir):
    folder = demo_assets.model_dir if which == "demo" else gqa_model_dir
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=packed_attention.register()).eval()
    batch, examples = _packed_batch(_rows(30), max_length=128)
    assert len(examples) > 4 and batch["input_ids"].shape[0] == 1  # several examples, flattened

    with torch.no_grad():
        packed = _per_example_losses(model, batch, batch)
        alone = [_alone(model, example) for example in examples]
        # The same tokens as one long sequence (no boundaries) do attend across examples,
        # so the comparison above can tell the difference.
        unbounded = {k: v for k, v in batch.items() if k not in BOUNDARY_KEYS}
        crossed = _per_example_losses(model, unbounded, batch)
    assert packed == pytest.approx(alone, abs=1e-4)
    assert max(abs(c - a) for c, a in zip(crossed[1:], alone[1:])) > 1e-3


def test_packed_examples_keep_the_sliding_window(sliding_model_dir):
    model = AutoModelForCausalLM.from_pretrained(sliding_model_dir, attn_implementation=packed_attention.register()).eval()
    # The reference is transformers' own sdpa, which builds the windowed mask itself.
    stock = AutoModelForCausalLM.from_pretrained(sliding_model_dir, attn_implementation="sdpa").eval()
    unwindowed = AutoModelForCausalLM.from_pretrained(sliding_model_dir, attn_implementation="sdpa").eval()
    unwindowed.config.sliding_window = None  # read at every forward, by the layers and the mask alike
    batch, examples = _packed_batch(_rows(30), max_length=128)
    assert sum(len(example) > 2 * SLIDING_WINDOW for example in examples) > 3

    with torch.no_grad():
        packed = _per_example_losses(model, batch, batch)
        alone = [_alone(stock, example) for example in examples]
        whole_context = [_alone(unwindowed, example) for example in examples]
        # An unpadded sequence that is not packed keeps the window too.
        longest = max(range(len(examples)), key=lambda i: len(examples[i]))
        single = _alone(model, examples[longest])
    assert packed == pytest.approx(alone, abs=1e-4)
    assert single == pytest.approx(alone[longest], abs=1e-4)
    # The window changes the numbers, so the comparison above can tell the difference.
    assert max(abs(w - a) for w, a in zip(whole_context, alone)) > 1e-3


def test_padded_batches_match_library_sdpa(demo_assets):
    tokenizer = AutoTokenizer.from_pretrained(demo_assets.model_dir)
    texts = ["What is the capital of Peru?", "Add the two numbers. 3 and 4", "Hi"]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    ours = AutoModelForCausalLM.from_pretrained(demo_assets.model_dir, attn_implementation=packed_attention.register())
    stock = AutoModelForCausalLM.from_pretrained(demo_assets.model_dir, attn_implementation="sdpa")
    with torch.no_grad():
        mine, theirs = ours(**batch, use_cache=False).logits, stock(**batch, use_cache=False).logits
    keep = batch["attention_mask"].bool()
    assert torch.allclose(mine[keep], theirs[keep], atol=1e-5)


def test_a_padding_free_batch_gives_the_padded_batchs_loss_and_gradients(demo_assets):
    """Unpacked CPU runs lay each micro-batch's rows end to end (TRL's padding_free): the
    same rows and labels, so the same loss and gradients as the padded batch."""
    rows = [{"input_ids": r, "labels": [-100] * 2 + r[2:]} for r in _rows(4)]  # a masked prompt, as chat rows have
    padded = DataCollatorForLanguageModeling(pad_token_id=0)(rows)
    flat = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    assert flat["input_ids"].numel() == sum(len(r["input_ids"]) for r in rows) < padded["input_ids"].numel()
    model = AutoModelForCausalLM.from_pretrained(demo_assets.model_dir, attn_implementation=packed_attention.register())
    results = []
    for batch in (padded, flat):
        model.zero_grad()
        loss = model(**batch, use_cache=False).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-5, atol=1e-6)
    for mine, theirs in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)


def test_only_packed_or_padding_free_cpu_runs_use_it():
    assert attention_for(typed({"packing": True}), CPU) == {"attn_implementation": packed_attention.NAME}
    assert attention_for(typed({"packing": False}), CPU) == {}
    assert attention_for(typed({"packing": False}), CPU, padding_free=True) == {"attn_implementation": packed_attention.NAME}
    # Which runs go padding-free: text SFT on a CPU, unpacked, more than one row a batch.
    assert padding_free_batches(typed({"batch_size": 4}), CPU)
    assert not padding_free_batches(typed({"batch_size": 4, "packing": True}), CPU)
    assert not padding_free_batches(typed({"batch_size": 1}), CPU)
    assert not padding_free_batches(typed({"batch_size": 4, "objective": "dpo"}), CPU)
    assert not padding_free_batches(typed({"batch_size": 4}), DeviceSettings(cuda=True, precision="bf16", gradient_checkpointing=True))
    cuda = attention_for(typed({"packing": True}), DeviceSettings(cuda=True, precision="bf16", gradient_checkpointing=True))
    assert cuda["attn_implementation"] in ("flash_attention_2", "flex_attention")  # CUDA's own varlen kernels
