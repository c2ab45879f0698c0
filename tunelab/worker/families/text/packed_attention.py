"""Attention for packed batches without FlashAttention: each example attends only to
itself, and costs only its own length.

With `packing`, TRL packs examples into rows of `max_seq_length` and flattens the whole
batch into one sequence whose position ids restart at every example (padding-free).
FlashAttention's variable-length kernels then compute exactly one causal block per
example. Without them — on every CPU — transformers' `sdpa` path builds a dense
block-diagonal mask over the flattened sequence and computes all of it: for 8 rows of
1,024 tokens that is attention over 8,192 positions, and packing ends up no faster than
padding. `packed_sdpa` cuts the sequence at the example boundaries the collator already
computed (`cu_seq_lens_q`, or where the position ids restart) and runs causal sdpa on
each piece: the same numbers, at the cost of the examples themselves. Any other batch
(padded, masked, a single sequence) goes to transformers' own sdpa unchanged.

Sliding-window layers (Mistral, Qwen2 and the like) pass their window as
`sliding_window`; since the mask hook hands over no mask for an unpadded batch, each
piece longer than the window gets a banded causal mask here, so a token sees only the
last `sliding_window` positions of its own example, as the library's mask would allow.

Used by the torch backend for packed runs on CPU (see `model_setup.attention_for`). On
CUDA, dense sdpa over the flattened batch is cheap next to launching one kernel per
example, so GPU runs keep the library default.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "tunelab_packed_sdpa"


def register() -> str:
    """Make `NAME` a valid `attn_implementation` (idempotent) and return it."""
    AttentionInterface.register(NAME, packed_sdpa)
    AttentionMaskInterface.register(NAME, packed_mask)
    return NAME


def packed_mask(*args: Any, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
    """No mask for a batch without padding (causality, a sliding window and the example
    boundaries of a packed batch are handled by `packed_sdpa`); sdpa's own mask otherwise."""
    if attention_mask is None:
        return None
    return sdpa_mask(*args, attention_mask=attention_mask, **kwargs)


def example_bounds(query: torch.Tensor, attention_mask: Any, kwargs: dict[str, Any]) -> list[int] | None:
    """[0, end of example 1, end of example 2, ..., length] for a packed sequence, else None."""
    if attention_mask is not None or query.shape[0] != 1 or query.shape[2] < 2:
        return None
    cu_seq_lens = kwargs.get("cu_seq_lens_q")
    if cu_seq_lens is not None:
        bounds = [int(b) for b in cu_seq_lens.tolist()]
    else:
        position_ids = kwargs.get("position_ids")
        if position_ids is None:
            return None
        starts = (position_ids.reshape(-1) == 0).nonzero().flatten().tolist()
        if not starts or starts[0] != 0:
            return None
        bounds = starts + [query.shape[2]]
    return bounds if len(bounds) > 2 else None


def window_mask(length: int, window: int, device: torch.device) -> torch.Tensor:
    """Causal, and each query sees only itself and the `window - 1` positions before it."""
    positions = torch.arange(length, device=device)
    distance = positions[:, None] - positions[None, :]
    return (distance >= 0) & (distance < window)


def _piece(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, window: int | None, dropout: float,
           scaling: float | None) -> torch.Tensor:
    length = query.shape[2]
    if window is None or length <= window:
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout, scale=scaling, is_causal=True)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=window_mask(length, window, query.device),
                                          dropout_p=dropout, scale=scaling)


def packed_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: Any, dropout: float = 0.0, scaling: float | None = None,
                **kwargs: Any) -> tuple[torch.Tensor, None]:
    window = kwargs.get("sliding_window")
    bounds = example_bounds(query, attention_mask, kwargs)
    if bounds is None and window and attention_mask is None and query.shape[2] == key.shape[2]:
        # Unpadded but not packed: `packed_mask` gave no mask, so the window is still ours to apply.
        bounds = [0, query.shape[2]]
    if bounds is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    pieces = [
        _piece(query[:, :, start:end], key[:, :, start:end], value[:, :, start:end], window, dropout, scaling)
        for start, end in zip(bounds[:-1], bounds[1:])
        if end > start
    ]
    return torch.cat(pieces, dim=2).transpose(1, 2).contiguous(), None
