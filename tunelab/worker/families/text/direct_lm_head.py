"""The LM head and loss for runs off CUDA: the labelled positions only, in one pass.

TRL's SFTTrainer patches the model with a fused LM head (`add_fused_lm_head`) and asks it
for each token's log-probability, entropy and top-1 hit. On CUDA that is Triton kernels
over vocabulary tiles. Without Triton (a CPU, Apple's MPS) it falls back to torch ops
that score *every* position (padding and masked prompt tokens too, to keep tile shapes
fixed for compilers that a CPU run does not use), build a (tokens x vocabulary) mask to
find the top-1 hit, and recompute every tile's logits and a dozen elementwise passes in
backward. Profiled with SmolLM2-135M (49k-entry vocabulary) on two idle CPU cores, that
head took 39% of a LoRA step; this one takes 19% (bench/real_model.py compares the whole
step with plain TRL on padding-free batches).

Here the same outputs come from the labelled positions alone: their logits, one
`log_softmax`, the label's log-probability (with gradient), and the entropy and top-1 hit
from that same result without gradient. The loss, token counts and metrics TRL computes
from these outputs are unchanged (`tests/worker/test_direct_lm_head.py` checks equal
loss, gradients, entropy and accuracy against TRL's head). Logits stay bounded: past
`CHUNK_ELEMENTS` logits the positions go in chunks, each recomputed in backward rather
than kept.

Models whose logits are not a plain projection (soft-capped, scaled), mixture-of-experts
routers, pre-shifted labels and FSDP-sharded heads keep TRL's head.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from tunelab.memory.plan import DIRECT_HEAD_CHUNK_ELEMENTS

# About 128 MB per fp32 copy of a chunk's logits; the head holds a few such copies at once
# (the memory plan counts them).
CHUNK_ELEMENTS = DIRECT_HEAD_CHUNK_ELEMENTS
# Config fields that change the logits beyond the projection (TRL's head applies them).
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


def supports(model: Any) -> bool:
    """Whether the model's logits are the plain projection this head computes."""
    text_config = model.config.get_text_config()
    if any(getattr(text_config, name, None) is not None for name in LOGIT_TRANSFORMS):
        return False
    return not getattr(text_config, "output_router_logits", False)


def install(trainer: Any) -> bool:
    """Replace TRL's fused head on the trainer's model with the direct one, where it
    applies; call after the trainer is built (TRL patches the model in its constructor)."""
    from peft import PeftModel

    model = trainer.model.get_base_model() if isinstance(trainer.model, PeftModel) else trainer.model
    if not supports(model) or not isinstance(model.__dict__.get("forward"), types.MethodType):
        return False  # no fused head was added (not a causal LM TRL patched)
    trl_forward = model.forward

    # The model's own signature, as TRL keeps it: `generate` reads it (whether to keep only
    # the last logits, pass the attention mask, which kwargs are valid).
    @functools.wraps(type(model).forward)
    def forward(self: Any, *args: Any, fused_lm_head: bool = False, labels: Any = None, shift_labels: Any = None,
                num_items_in_batch: Any = None, **kwargs: Any) -> Any:
        if not fused_lm_head or shift_labels is not None or kwargs.get("output_router_logits"):
            return trl_forward(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels,
                               num_items_in_batch=num_items_in_batch, **kwargs)
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state[:, :-1]
        return score(self.get_output_embeddings(), hidden, labels[:, 1:], num_items_in_batch)

    model.forward = types.MethodType(forward, model)
    return True


def score(head: Any, hidden: torch.Tensor, targets: torch.Tensor, num_items_in_batch: Any = None) -> Any:
    """TRL's `FusedCausalLMOutput` for next-token `targets` (-100: ignored) of `hidden`."""
    from trl.trainer.utils import FusedCausalLMOutput

    mask = targets != -100
    picked, wanted = hidden[mask], targets[mask]
    vocab = head.weight.shape[0]
    step = max(1, CHUNK_ELEMENTS // vocab)
    if picked.shape[0] <= step:
        log_probs, entropy, is_top1 = _chunk(head, picked, wanted)
    else:
        parts = [checkpoint(_chunk, head, picked[i:i + step], wanted[i:i + step], use_reentrant=False)
                 for i in range(0, picked.shape[0], step)]
        log_probs, entropy, is_top1 = (torch.cat(column) for column in zip(*parts))
    # Zero on ignored positions, like TRL's head; masked_scatter keeps an all-ignored
    # micro-batch connected to the graph (a differentiable zero).
    full = log_probs.new_zeros(mask.shape).masked_scatter(mask, log_probs)
    count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    return FusedCausalLMOutput(
        loss=-full.sum() / count,
        log_probs=full,
        entropy=entropy.new_zeros(mask.shape).masked_scatter(mask, entropy),
        is_top1=is_top1.new_zeros(mask.shape).masked_scatter(mask, is_top1),
        label_mask=mask,
    )


def _chunk(head: Any, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logits = head(hidden)
    log_softmax = F.log_softmax(logits.float(), dim=-1)
    log_probs = log_softmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        # In place: one (positions x vocabulary) temporary instead of two (the same numbers;
        # 40 -> 25 ms for 254 x 49,152).
        probabilities = log_softmax.exp()
        entropy = -probabilities.mul_(log_softmax).sum(-1)
        # The log-softmax keeps the logits' order (fp32 resolves every bf16 step), so its argmax
        # is theirs; torch's CPU argmax over fp32 is ~4x faster than over the bf16 logits
        # autocast gives (14.6 -> 3.9 ms for 1,000 x 8,192): 6% of the whole-run job's step.
        is_top1 = log_softmax.argmax(-1) == targets
    return log_probs, entropy, is_top1
