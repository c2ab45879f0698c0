"""A learning rate of their own for the embedding matrices (`embedding_learning_rate`).

Continued pretraining on a new domain or language has to move the input embeddings and
the output head, yet at the body's rate those large, sparsely-updated matrices drift
the most; the usual recipe trains them at a rate several times lower. Two parts:
  modules_to_save(model)  the module names PEFT trains whole beside a LoRA adapter (an
                          adapter run otherwise leaves both matrices frozen)
  split_groups(...)       the Trainer's optimizer groups with the embedding parameters
                          moved into groups of their own at the embedding rate
The body's groups stay first, so the learning rate the Trainer logs (group 0) is still
the run's `learning_rate`.
"""

from __future__ import annotations

from typing import Any


def _embedding_modules(model: Any) -> list[Any]:
    found = [model.get_input_embeddings()]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and head is not found[0]:
        found.append(head)
    return found


def modules_to_save(model: Any) -> list[str]:
    """Short names (PEFT matches them as suffixes) of the input embeddings and the head."""
    wanted = {id(module) for module in _embedding_modules(model)}
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules() if id(module) in wanted and name})


def ties_embeddings(model: Any) -> bool:
    """Whether the head shares the input embeddings' weight (PEFT must keep the two copies tied)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return head is not None and head.weight is model.get_input_embeddings().weight


def embedding_parameter_ids(model: Any) -> set[int]:
    """The trainable parameters of the embeddings and head (for an adapter run, PEFT's
    trained copies inside its wrappers; the frozen originals are not in any group)."""
    return {id(p) for module in _embedding_modules(model) for p in module.parameters() if p.requires_grad}


def split_groups(groups: list[dict[str, Any]], embedding_ids: set[int], rate: float) -> list[dict[str, Any]]:
    """`groups` (each with params and weight_decay) with the embedding parameters moved to
    groups at `rate`; body groups first, empty groups dropped."""
    body, embeddings = [], []
    for group in groups:
        params = list(group["params"])
        kept = {"weight_decay": group.get("weight_decay", 0.0)}
        rest = [p for p in params if id(p) not in embedding_ids]
        moved = [p for p in params if id(p) in embedding_ids]
        if rest:
            body.append({**kept, "params": rest})
        if moved:
            embeddings.append({**kept, "params": moved, "lr": rate})
    if not embeddings:
        raise ValueError("embedding_learning_rate is set but no embedding parameter trains; check finetune_language_layers")
    return body + embeddings
