"""The direct LM head off CUDA (`worker/families/text/direct_lm_head.py`) gives what TRL's fused head
gives: the same loss, gradients, entropy and top-1 accuracy through TRL's own
`compute_loss`, on batches with padding, masked prompts, several chunks, top-1 hits, bf16
autocast and no label at all; real SFTTrainer runs log the same numbers with either head
(gradient accumulation, sparse logging, an eval set, packing, tied full fine-tuning);
models whose logits are more than a projection keep TRL's head."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from datasets import Dataset  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, Gemma2Config, LlamaConfig  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from tunelab.demos.assets import sample_pairs  # noqa: E402
from tunelab.worker.families.text import direct_lm_head  # noqa: E402


@pytest.fixture(scope="module")
def trainer(demo_assets, tmp_path_factory):
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(demo_assets.model_dir)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(demo_assets.model_dir),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    # LoRA's B starts at zero: move it so the adapter's gradients depend on the head's.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)
    args = SFTConfig(output_dir=str(tmp_path_factory.mktemp("head")), use_cpu=True, bf16=False, report_to="none",
                     max_length=64, disable_tqdm=True)
    rows = Dataset.from_dict({"input_ids": [[1, 2, 3]]})
    return SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer)


def _batch(vocab: int, prompt: int, model=None) -> dict:
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(3, vocab, (3, 24), generator=generator)
    if model is not None:
        # Every other label is the model's own top-1 guess, so the accuracy compared is not 0 == 0.
        with torch.no_grad():
            for t in range(prompt, 23, 2):
                ids[:, t + 1] = model(input_ids=ids).logits[:, t].argmax(-1)
    attention = torch.ones_like(ids)
    attention[1, 17:] = 0  # padding at the end of one row
    labels = ids.masked_fill(attention == 0, -100)
    labels[:, :prompt] = -100  # a masked prompt
    return {"input_ids": ids, "attention_mask": attention, "labels": labels}


def _loss_and_grads(trainer, batch, num_items=None):
    trainer.model.zero_grad()
    trainer._metrics["train"].clear()
    loss = trainer.compute_loss(trainer.model, dict(batch), num_items_in_batch=num_items)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads, {k: v[-1] for k, v in trainer._metrics["train"].items() if k != "num_tokens"}


@pytest.mark.parametrize("chunk_elements,prompt,num_items,hits,bf16", [
    (direct_lm_head.CHUNK_ELEMENTS, 6, None, False, False),    # one chunk
    (4 * 1000, 6, None, True, False),                           # several chunks, each recomputed in backward
    (direct_lm_head.CHUNK_ELEMENTS, 6, 90, False, False),       # gradient accumulation's count over micro-batches
    (direct_lm_head.CHUNK_ELEMENTS, 24, None, False, False),    # no label at all: a zero loss that still backpropagates
    (direct_lm_head.CHUNK_ELEMENTS, 6, None, True, False),      # top-1 hits: a nonzero accuracy
    (4 * 1000, 6, None, True, True),                            # bf16 autocast (bf16=True, use_cpu=True), chunked
])
def test_the_direct_head_gives_trls_loss_gradients_and_metrics(trainer, monkeypatch, chunk_elements, prompt, num_items,
                                                               hits, bf16):
    base = trainer.model.get_base_model()
    batch = _batch(base.config.vocab_size, prompt, trainer.model if hits else None)
    trl_forward = base.forward
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        expected = _loss_and_grads(trainer, batch, num_items)
        monkeypatch.setattr(direct_lm_head, "CHUNK_ELEMENTS", chunk_elements)
        assert direct_lm_head.install(trainer)
        assert base._supports_logits_to_keep()  # the model's signature kept, which `generate` reads
        try:
            loss, grads, metrics = _loss_and_grads(trainer, batch, num_items)
        finally:
            base.forward = trl_forward
    torch.testing.assert_close(loss, expected[0], rtol=1e-5, atol=1e-6)
    assert grads.keys() == expected[1].keys() and grads
    for name, grad in grads.items():
        if bf16:  # the same bf16 logits, but TRL sums the head's backward in fp32 and autograd in bf16
            assert (grad - expected[1][name]).norm() <= 1e-2 * expected[1][name].norm(), name
        else:
            torch.testing.assert_close(grad, expected[1][name], rtol=1e-4, atol=1e-6)
    assert metrics.keys() == expected[2].keys() == {"entropy", "mean_token_accuracy"}
    for key, value in metrics.items():
        assert value == pytest.approx(expected[2][key], rel=1e-5, abs=1e-6)
    if prompt < 24:
        assert loss > 0 and metrics["entropy"] > 0
    if hits:
        assert metrics["mean_token_accuracy"] > 0.3


def test_the_direct_head_is_only_for_plain_projections(trainer):
    assert direct_lm_head.supports(trainer.model.get_base_model())
    # Gemma 2 soft-caps its logits: TRL's head applies the cap, so it stays.
    tiny = Gemma2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=8)
    assert tiny.final_logit_softcapping is not None
    assert not direct_lm_head.supports(AutoModelForCausalLM.from_config(tiny))


# What the trainer logs, compared between the heads (timings and the learning rate left out).
LOGGED = ("loss", "grad_norm", "entropy", "mean_token_accuracy", "num_tokens", "train_loss",
          "eval_loss", "eval_entropy", "eval_mean_token_accuracy", "eval_num_tokens")


def _train_log(demo_assets, folder, direct: bool, tied: bool, **settings) -> list[dict]:
    tokenizer = AutoTokenizer.from_pretrained(demo_assets.model_dir)
    rows = [{"prompt": row["instruction"] + " ", "completion": row["output"]} for row in sample_pairs(16)]
    torch.manual_seed(0)
    if tied:  # full fine-tuning of a model whose head is its embedding table
        model = AutoModelForCausalLM.from_config(LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id))
    else:
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(demo_assets.model_dir),
                               LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    args = SFTConfig(output_dir=str(folder), use_cpu=True, report_to="none", max_length=64, disable_tqdm=True, seed=0,
                     learning_rate=1e-3, save_strategy="no", per_device_train_batch_size=2, **settings)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows[:12]), processing_class=tokenizer,
                         eval_dataset=Dataset.from_list(rows[12:]) if settings.get("eval_strategy") else None)
    assert not direct or direct_lm_head.install(trainer)
    trainer.train()
    return [{key: entry[key] for key in LOGGED if key in entry} for entry in trainer.state.log_history]


@pytest.mark.parametrize("tied,settings", [
    # LoRA, completion-only labels, two micro-batches a step, a log every two steps, an eval set
    (False, dict(gradient_accumulation_steps=2, logging_steps=2, max_steps=2, bf16=False, eval_strategy="steps",
                 eval_steps=2, per_device_eval_batch_size=3)),
    # padding-free packing (position ids, no attention mask), bf16 autocast, tied embeddings trained
    (True, dict(packing=True, bf16=True, logging_steps=1, max_steps=2)),
])
def test_a_training_run_logs_trls_numbers_with_the_direct_head(demo_assets, tmp_path, tied, settings):
    expected = _train_log(demo_assets, tmp_path / "trl", False, tied, **settings)
    logged = _train_log(demo_assets, tmp_path / "direct", True, tied, **settings)
    assert [entry.keys() for entry in logged] == [entry.keys() for entry in expected]
    assert any("eval_loss" in entry for entry in logged) == ("eval_strategy" in settings)
    # bf16: the head's gradient is summed in bf16 rather than TRL's fp32, which moves the logged norm and, through
    # the update, the next step's numbers in the 4th-5th digit (the bf16 unit case above pins one step exactly).
    rel = 1e-3 if settings.get("bf16") else 1e-5
    for entry, want in zip(logged, expected):
        for key, value in entry.items():
            assert value == pytest.approx(want[key], rel=rel), key
