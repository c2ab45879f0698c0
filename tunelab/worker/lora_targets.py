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

from typing import Any

import torch

from tunelab.config.run_config import FINETUNE_SWITCHES


def _on(config: dict[str, Any], name: str) -> bool:
    return config.get(name, True) is not False


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


def switches_at_default(config: dict[str, Any]) -> bool:
    return all(config.get(name, True) is not False for name in FINETUNE_SWITCHES)


def select_targets(model: Any, config: dict[str, Any]) -> list[str]:
    """Full names of the linear layers the switches choose (config validation makes sure
    at least one part and one kind are on)."""
    parts, kinds = _chosen(config)
    return sorted(name for name, (part, kind) in classify_linear_layers(model).items() if part in parts and kind in kinds)


def _chosen(config: dict[str, Any]) -> tuple[set[str], set[str]]:
    parts = {part for part in ("vision", "language") if _on(config, f"finetune_{part}_layers")}
    kinds = {kind for kind in ("attention", "mlp") if _on(config, f"finetune_{kind}_modules")}
    return parts, kinds


def freeze_switched_off(model: Any, config: dict[str, Any]) -> None:
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
