"""Which layers a run trains, from the `finetune_*` switches: an adapter's target
layers, or for full fine-tuning the parameters left trainable.

Every `torch.nn.Linear` of the model falls into one part and one kind, found from the
model's structure rather than from module names:
  part  language — inside the language model (`model.language_model`, else the decoder);
        vision   — every other linear layer: the vision tower and its projector.
        The output head (`get_output_embeddings`) is in neither: adapters leave it alone.
  kind  attention — the layer's parent module is an attention block (its class name
        says Attention, as every transformers model's does); mlp — everything else
        (MLP / feed-forward projections, and a vision projector's linear layers).
A text model has only a language part, so `finetune_vision_layers` changes nothing there.
Full fine-tuning trains every parameter except what a switch turns off: a part switched
off freezes every parameter in it (embeddings, norms and the output head count as
language), a kind switched off freezes that kind's linear layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from tunelab.config.run_config import FINETUNE_SWITCHES

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def _language_model(model: Any) -> Any:
    found = getattr(model, "language_model", None)
    if isinstance(found, torch.nn.Module):
        return found
    inner = getattr(model, "model", None)
    found = getattr(inner, "language_model", None)
    if isinstance(found, torch.nn.Module):
        return found
    return model.get_decoder() if hasattr(model, "get_decoder") else model


def classify_linear_layers(model: Any) -> dict[str, tuple[str, str]]:
    """Every linear layer's full name -> (part, kind), the output head left out."""
    language = {id(m) for m in _language_model(model).modules()}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    modules = dict(model.named_modules())
    found = {}
    for name, module in modules.items():
        if not isinstance(module, torch.nn.Linear) or module is head:
            continue
        parent = modules.get(name.rsplit(".", 1)[0] if "." in name else "")
        kind = "attention" if parent is not None and "attention" in type(parent).__name__.lower() else "mlp"
        found[name] = ("language" if id(module) in language else "vision", kind)
    return found


def switches_at_default(config: WorkerConfig) -> bool:
    return all(getattr(config, name) for name in FINETUNE_SWITCHES)  # every switch is on by default


def select_targets(model: Any, config: WorkerConfig) -> list[str]:
    """Full names of the linear layers the switches choose (config validation makes sure
    at least one part and one kind are on)."""
    parts, kinds = _chosen(config)
    return sorted(name for name, (part, kind) in classify_linear_layers(model).items() if part in parts and kind in kinds)


def _chosen(config: WorkerConfig) -> tuple[set[str], set[str]]:
    parts = {part for part, on in (("vision", config.finetune_vision_layers), ("language", config.finetune_language_layers)) if on}
    kinds = {kind for kind, on in (("attention", config.finetune_attention_modules), ("mlp", config.finetune_mlp_modules)) if on}
    return parts, kinds


def freeze_switched_off(model: Any, config: WorkerConfig) -> None:
    """Full fine-tuning: freeze the parameters the switches turn off (the rest stay trainable)."""
    parts, kinds = _chosen(config)
    language = {id(p) for p in _language_model(model).parameters()}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    language |= {id(p) for p in head.parameters()} if head is not None else set()
    for parameter in model.parameters():
        if ("language" if id(parameter) in language else "vision") not in parts:
            parameter.requires_grad_(False)
    modules = dict(model.named_modules())
    for name, (part, kind) in classify_linear_layers(model).items():
        if kind not in kinds:
            for parameter in modules[name].parameters():
                parameter.requires_grad_(False)
