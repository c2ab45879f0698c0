"""Rows `data.prepare` made trainer-ready skip TRL's own pass over the dataset, and the
trainer then feeds the model exactly the batches it fed after that pass: the same ids,
the same labels, in the same order — padded, padding-free, and with completion masking."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from typed_config import typed
from tunelab.config.run_config import parse_config  # noqa: E402
from tunelab.worker.run_config import worker_config  # noqa: E402
from tunelab.worker import model_setup  # noqa: E402
from tunelab.worker.data.prepare import load_raw, prepare  # noqa: E402
from tunelab.worker.families.text.sft_trainer import build_sft_trainer  # noqa: E402


def _batches(trainer, count: int = 3) -> list[dict]:
    loader = trainer.get_train_dataloader()
    out = []
    for batch in loader:
        out.append({k: v.tolist() for k, v in batch.items() if hasattr(v, "tolist")})
        if len(out) == count:
            return out
    return out


@pytest.mark.parametrize("completions, padding_free", [(False, False), (True, True), (False, True)])
def test_skipping_trls_pass_feeds_the_same_batches(demo_assets, tmp_path, completions, padding_free):
    config = worker_config(parse_config({"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.sharegpt)], "format": "auto",
              "max_seq_length": 48, "training_type": "lora", "batch_size": 2, "max_steps": 3, "eval_steps": 0,
              "train_on_completions": completions, "seed": 5, "save_steps": 0, "logging_steps": 1}).worker_payload())
    device = model_setup.DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)
    tokenizer = model_setup.load_tokenizer(config)
    model = model_setup.load_model(config, device, padding_free=padding_free)
    ready = prepare(typed(config), tokenizer, load_raw(config, tmp_path / "cache"))
    assert ready.trainer_ready

    def trainer(prepared, name):
        return build_sft_trainer(typed(config.model_copy(update={"output_dir": str(tmp_path / name)})), device, model, tokenizer, prepared,
                                 tmp_path / name, [], padding_free)

    skipped = trainer(ready, "skip")
    passed = trainer(replace(ready, trainer_ready=False), "trl")
    assert skipped.args.dataset_kwargs.get("skip_prepare_dataset") is True
    assert not (passed.args.dataset_kwargs or {}).get("skip_prepare_dataset")
    ours, theirs = _batches(skipped), _batches(passed)
    assert len(ours) == 3
    assert ours == theirs
