"""What the mlx backend cannot do is refused by `parse_config`, before any process starts."""

from __future__ import annotations

import pytest

from tunelab.config.run_config import ConfigError, parse_config

pytestmark = pytest.mark.mlx

BASE = {"model_name": "org/model", "local_datasets": ["data.jsonl"], "backend": "mlx"}


@pytest.mark.parametrize(
    "overrides, field, words",
    [
        ({"training_type": "qlora"}, "training_type", "QLoRA"),
        ({"load_in_4bit": True}, "training_type", "bitsandbytes"),
        ({"use_loftq": True}, "use_loftq", "LoftQ"),
        ({"gpu_ids": [0]}, "gpu_ids", "remove gpu_ids"),
        ({"packing": True}, "packing", "packing=false"),
        ({"report_to": "wandb"}, "report_to", "report_to=none"),
        ({"lr_scheduler_type": "polynomial"}, "lr_scheduler_type", "cosine"),
        ({"optim": "adamw_8bit"}, "optim", "optim=adamw_torch"),
        ({"optim": "sgd"}, "optim", "AdamW"),
    ],
)
def test_unsupported_option_is_refused_naming_the_field(overrides, field, words):
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **overrides})
    messages = {e.field: e.message for e in info.value.errors}
    assert field in messages, messages
    assert words in messages[field] and "mlx" in messages[field]


@pytest.mark.parametrize(
    "overrides",
    [
        {"use_dora": True},
        {"use_rslora": True},
        {"training_type": "full"},
        {"training_type": "continued_pretraining"},
        {"lr_scheduler_type": "cosine", "warmup_ratio": 0.1, "optim": "adamw_torch_fused"},
        {"dataset": "org/data", "local_datasets": []},
        {"gradient_checkpointing": True, "precision": "bf16", "save_total_limit": 2},
        {"max_grad_leaf_norm": 0.5, "max_grad_value": 0.1},  # clipped as the torch backend does (backends/mlx/loop.GradientClips)
    ],
)
def test_supported_options_pass_validation(overrides):
    cfg = parse_config({**BASE, **overrides})
    assert cfg.resolved_backend == "mlx"


def test_the_same_options_stay_valid_for_the_torch_backend():
    cfg = parse_config({**BASE, "backend": "torch", "packing": True, "lr_scheduler_type": "polynomial", "optim": "sgd"})
    assert cfg.packing is True
