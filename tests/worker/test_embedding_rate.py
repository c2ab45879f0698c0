"""`embedding_learning_rate`: the embeddings and output head train at their own rate.

Through the real worker in a spawn child, for an adapter run (the two matrices trained
whole beside the adapter) and for continued pretraining (every weight trains): the saved
optimizer holds the body's groups at `learning_rate` and the embedding groups at the
embedding rate, and the weights moved by what those rates allow (Adam moves each weight
by about its rate per step). Settings that could never apply are refused up front.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from spawned_worker import demo_config, run_to_end

from tunelab import events as ev
from tunelab.config.run_config import ConfigError, parse_config

BODY_RATE, EMBEDDING_RATE, STEPS = 2e-3, 1e-5, 2


def _base_weights(assets) -> dict[str, torch.Tensor]:
    return load_file(str(assets.model_dir / "model.safetensors"))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lora", "continued_pretraining"])
def test_the_embeddings_train_at_their_own_rate(demo_assets, tmp_path, method):
    out = tmp_path / "out"
    final, _ = run_to_end(demo_config(demo_assets, out, training_type=method, learning_rate=BODY_RATE,
                                      embedding_learning_rate=EMBEDDING_RATE, lr_scheduler_type="constant",
                                      max_steps=STEPS, save_steps=STEPS))
    assert final["type"] == ev.COMPLETE, final
    groups = torch.load(out / f"checkpoint-{STEPS}" / "optimizer.pt", weights_only=True)["param_groups"]
    rates = [group["lr"] for group in groups]
    body = [group for group in groups if group["lr"] == BODY_RATE]
    embedding = [group for group in groups if group["lr"] == EMBEDDING_RATE]
    assert len(body) + len(embedding) == len(groups) and rates[0] == BODY_RATE, rates
    # The demo model's input embeddings and head are two separate matrices.
    assert sum(len(group["params"]) for group in embedding) == 2

    base = _base_weights(demo_assets)
    if method == "lora":
        trained = load_file(str(out / "adapter_model.safetensors"))
        moved = {name: tensor for name, tensor in trained.items() if "lora_" not in name}
        assert sorted(name.split(".")[-2] for name in moved) == ["embed_tokens", "lm_head"]
        body_change = max(tensor.abs().max().item() for name, tensor in trained.items() if "lora_B" in name)
        originals = {name: base[next(k for k in base if k.endswith(name.split(".")[-2] + ".weight"))] for name in moved}
    else:
        trained = load_file(str(out / "model.safetensors"))
        moved = {name: trained[name] for name in trained if "embed_tokens" in name or "lm_head" in name}
        originals = {name: base[name] for name in moved}
        body_change = max((trained[name] - base[name]).abs().max().item() for name in trained if name not in moved)
    embedding_change = max((moved[name].float() - originals[name].float()).abs().max().item() for name in moved)
    assert 0 < embedding_change <= 3 * STEPS * EMBEDDING_RATE
    assert body_change > 10 * STEPS * EMBEDDING_RATE


@pytest.mark.parametrize(("settings", "message"), [
    ({"finetune_language_layers": False}, "finetune_language_layers=false freezes"),
    ({"backend": "mlx"}, "the mlx backend trains with one learning rate"),
])
def test_an_embedding_rate_that_could_never_apply_is_refused(settings, message):
    with pytest.raises(ConfigError) as refused:
        parse_config({"model_name": "m", "dataset": "d", "embedding_learning_rate": 1e-5, **settings})
    assert [(e.field, message in e.message) for e in refused.value.errors if e.field == "embedding_learning_rate"] == [
        ("embedding_learning_rate", True)]
