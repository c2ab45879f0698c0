"""The token count of a run (`TokenCountingSFTTrainer`): on packed, padding-free batches
with pad = eos (the usual fallback when a tokenizer has no pad token) every EOS counts,
which the Trainer's own non-padding count gets wrong; the count survives a checkpoint."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402

from tunelab.worker.families.text.sft_trainer import TokenCountingSFTTrainer  # noqa: E402


def _train(trainer_class, assets, tmp_path, counting: str) -> tuple[int, int, object]:
    tokenizer = AutoTokenizer.from_pretrained(assets.model_dir)
    tokenizer.pad_token = tokenizer.eos_token
    texts = [line for line in assets.text.read_text().splitlines() if line.strip()][:12]
    rows = [tokenizer(json.loads(t)["text"])["input_ids"][:30] + [tokenizer.eos_token_id] for t in texts]
    args = SFTConfig(output_dir=str(tmp_path / counting), packing=True, max_length=64, per_device_train_batch_size=2,
                     num_train_epochs=1, use_cpu=True, bf16=False, report_to="none", save_strategy="steps",
                     save_steps=1, logging_steps=50, include_num_input_tokens_seen=counting, disable_tqdm=True)
    trainer = trainer_class(model=AutoModelForCausalLM.from_pretrained(assets.model_dir), args=args,
                            train_dataset=Dataset.from_dict({"input_ids": rows}), processing_class=tokenizer)
    trainer.train()
    return trainer.state.num_input_tokens_seen, sum(len(r) for r in rows), trainer


def test_packed_rows_count_every_eos_when_pad_is_eos(demo_assets, tmp_path):
    stock, expected, _ = _train(SFTTrainer, demo_assets, tmp_path, "non_padding")
    assert stock < expected  # the Trainer's own count drops the EOS tokens
    counted, expected, trainer = _train(TokenCountingSFTTrainer, demo_assets, tmp_path, "no")
    assert counted == expected
    # The count is folded in before each checkpoint's state is written, so a resume continues it.
    saved = json.loads((tmp_path / "no" / "checkpoint-1" / "trainer_state.json").read_text())
    assert 0 < saved["num_input_tokens_seen"] < expected
