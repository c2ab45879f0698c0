"""The finetune_* switches choose exactly the adapted layers: vision or language part,
attention or MLP kind — read from the model's structure, on the tiny LLaVA and the text
demo's Llama alike — and settings that would train nothing are refused up front."""

from __future__ import annotations

import pytest

from typed_config import typed
from tunelab.config.run_config import ConfigError, parse_config
from tunelab.worker.lora_targets import classify_linear_layers
from tunelab.worker.families.text.family import TextFamily
from tunelab.worker.families.vision.family import VisionFamily
from tunelab.worker.families.registry import family_spec
from tunelab.worker.model_setup import DeviceSettings, load_model, wrap_for_training
from tunelab.worker.families.vision.model import model_class

CPU = DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)
SWITCHES = {"vision": "finetune_vision_layers", "language": "finetune_language_layers",
            "attention": "finetune_attention_modules", "mlp": "finetune_mlp_modules"}


def _adapted(model) -> set[str]:
    """Base-model names of the layers that got a LoRA adapter (and only those train)."""
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained and all(".lora_" in name for name in trained)
    return {name.removeprefix("base_model.model.").split(".lora_")[0] for name in trained}


@pytest.mark.parametrize("off", [(), ("vision",), ("language",), ("attention",), ("mlp",), ("vision", "attention")])
def test_each_switch_changes_exactly_the_layers_it_names(vision_assets, off):
    config = typed({"model_name": str(vision_assets.model_dir), "training_type": "lora", "lora_r": 4,
                    **{SWITCHES[name]: False for name in off}})
    assert family_spec(config).name == "vision"
    model = load_model(config, CPU, model_class())
    layers = classify_linear_layers(model)
    assert {part for part, _ in layers.values()} == {"vision", "language"}
    expected = {name for name, (part, kind) in layers.items() if part not in off and kind not in off}
    wrapped = wrap_for_training(model, config, CPU, VisionFamily().targets(model, config))
    assert _adapted(wrapped) == expected
    assert "lm_head" not in expected and any("vision_tower" in n for n in layers if layers[n][0] == "vision")


def test_a_text_model_keeps_its_default_targets_and_honours_the_kind_switches(demo_assets):
    config = typed({"model_name": str(demo_assets.model_dir), "training_type": "lora", "lora_r": 4})
    assert family_spec(config).name == "text"
    family = TextFamily()
    model = load_model(config, CPU)
    assert family.targets(model, config) is None  # the text path's own defaults, unchanged
    attention_only = typed(config, finetune_mlp_modules=False)
    wrapped = wrap_for_training(model, attention_only, CPU, family.targets(model, attention_only))
    assert {name.rsplit(".", 1)[-1] for name in _adapted(wrapped)} == {"q_proj", "k_proj", "v_proj", "o_proj"}


@pytest.mark.parametrize("settings, field", [
    ({"finetune_vision_layers": False, "finetune_language_layers": "off"}, "finetune_language_layers"),
    ({"finetune_attention_modules": False, "finetune_mlp_modules": False}, "finetune_mlp_modules"),
    ({"target_modules": ["q_proj"], "finetune_vision_layers": False}, "finetune_vision_layers"),
])
def test_switches_that_train_nothing_or_fight_target_modules_are_refused(settings, field):
    with pytest.raises(ConfigError) as refused:
        parse_config({"model_name": "m", "local_datasets": ["d.jsonl"], **settings})
    assert [e.field for e in refused.value.errors] == [field]


@pytest.mark.parametrize("off", [("vision",), ("language", "mlp"), ("attention",)])
def test_full_fine_tuning_trains_exactly_what_the_switches_leave_on(vision_assets, off):
    config = typed({"model_name": str(vision_assets.model_dir), "training_type": "full", **{SWITCHES[name]: False for name in off}})
    model = load_model(config, CPU, model_class())
    layers = classify_linear_layers(model)
    language = {id(p) for p in model.model.language_model.parameters()} | {id(p) for p in model.lm_head.parameters()}
    switched_off_linear = {f"{name}.{kind}" for name, (part, layer_kind) in layers.items() if layer_kind in off
                           for kind in ("weight", "bias")}
    expected = {name for name, p in model.named_parameters()
                if ("language" if id(p) in language else "vision") not in off and name not in switched_off_linear}
    wrapped = VisionFamily().wrap(model, config, CPU)
    assert {name for name, p in wrapped.named_parameters() if p.requires_grad} == expected
    assert expected  # something trains, and something is frozen
    assert len(expected) < len(list(wrapped.parameters()))


def test_the_mlx_backend_refuses_a_vision_model_before_the_run_exists(vision_assets, demo_assets):
    from tunelab.orchestrator.prechecks import check_before_start

    def config(assets, data):
        return parse_config({"model_name": str(assets.model_dir), "local_datasets": [str(data)], "backend": "mlx"})

    with pytest.raises(ConfigError) as refused:
        check_before_start(config(vision_assets, vision_assets.messages))
    assert [e.field for e in refused.value.errors] == ["backend"]
    assert "vision-language model" in refused.value.errors[0].message and "backend=torch" in refused.value.errors[0].message
    check_before_start(config(demo_assets, demo_assets.alpaca))  # a text model is fine


@pytest.mark.parametrize("method", [{"use_dora": True}, {"use_rslora": True}, {"training_type": "full"}])
def test_each_method_takes_a_training_step_on_an_image_batch(vision_assets, processor, tmp_path, method):
    import torch

    from tunelab.worker.data.sources import load_raw
    from tunelab.worker.families.vision.data import prepare

    config = typed({"model_name": str(vision_assets.model_dir), "training_type": "lora", "lora_r": 4, "max_seq_length": 128,
              "batch_size": 2, "local_datasets": [str(vision_assets.captions)], "train_on_completions": True, **method})
    prepared = prepare(typed(config), processor, load_raw(typed(config), tmp_path / "cache"))
    batch = prepared.collator([prepared.train[0], prepared.train[1]])
    model = VisionFamily().wrap(load_model(config, CPU, model_class()), config, CPU)
    loss = model(**batch).loss
    loss.backward()
    trained = [p for p in model.parameters() if p.requires_grad]
    # Full fine-tuning also "trains" the tower's final norm, which LLaVA never reads.
    assert torch.isfinite(loss) and sum(p.grad is not None for p in trained) >= 0.9 * len(trained)
    vision_grads = [p.grad for n, p in model.named_parameters() if p.requires_grad and "vision_tower" in n]
    assert vision_grads and any(g.abs().sum() > 0 for g in vision_grads)  # the loss reaches the vision tower
