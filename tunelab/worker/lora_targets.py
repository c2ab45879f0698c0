"""Which linear layers an adapter trains, from the `finetune_*` switches.

Every `torch.nn.Linear` of the model falls into one part and one kind, found from the
model's structure rather than from module names:
  part  language — inside the language model (`model.language_model`, else the decoder);
        vision   — every other linear layer: the vision tower and its projector.
        The output head (`get_output_embeddings`) is in neither: adapters leave it alone.
  kind  attention — the layer's parent module is an attention block (its class name
        says Attention, as every transformers model's does); mlp — everything else
        (MLP / feed-forward projections, and a vision projector's linear layers).
A text model has only a language part, so `finetune_vision_layers` changes nothing there.
"""

from __future__ import annotations

from typing import Any

import torch

from tunelab.config import FINETUNE_SWITCHES


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
    parts = {p for p, on in (("vision", config.get("finetune_vision_layers", True)),
                             ("language", config.get("finetune_language_layers", True))) if on is not False}
    kinds = {k for k, on in (("attention", config.get("finetune_attention_modules", True)),
                             ("mlp", config.get("finetune_mlp_modules", True))) if on is not False}
    return sorted(name for name, (part, kind) in classify_linear_layers(model).items() if part in parts and kind in kinds)
