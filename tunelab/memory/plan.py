"""Will it fit? Peak training memory per device, estimated from a model's config.json.

Pure Python (no torch): the server answers it live while the form changes, and the
orchestrator checks it before a run starts (memory/fit.py). The figures follow what the
worker actually builds (model_setup.py):

- weights: an adapter run loads its frozen base in the half type on CUDA (bf16/fp16) and
  in fp32 on a CPU; full fine-tuning keeps every weight in fp32. A 4-bit base (QLoRA) is
  NF4 with double quantisation: 4 bits per linear weight plus its block constants, while
  PEFT's `prepare_model_for_kbit_training` upcasts everything it did not quantise
  (embeddings, output head, norms) to fp32.
- adapter: LoRA's A and B per targeted module, r x (in + out), in fp32; DoRA adds one
  magnitude per output row. With `embedding_learning_rate` the embeddings and head train
  whole beside it (PEFT keeps a trainable copy).
- gradients: fp32, one per trained parameter; optimizer: AdamW keeps two fp32 moments (8
  bytes a parameter), the 8-bit optimizers two bytes, Lion one moment, SGD none.
- activations: what each decoder layer saves for the backward pass, per token — the two
  norms' inputs and outputs, q and attention output (hidden wide), k and v (kv wide), and
  the MLP's gate, up, activation and product (intermediate wide) — with flash/SDPA
  attention (no seq x seq scores). Gradient checkpointing keeps each layer's input only
  and recomputes one layer at a time. The LM head's logits (batch x seq x vocab) are
  counted apart, as the head makes them: on CUDA TRL's fused head, one tile of at most
  4,096 tokens x 32,768 vocabulary entries at a time; elsewhere tunelab's direct head,
  at most 32M logits of labelled positions at a time.
- on a CPU, resident memory rather than tensors: glibc's malloc serves the step's
  activation-sized blocks from its heap (after the first free its mmap threshold rises, up
  to 32 MiB) and keeps what they free for reuse, so the process holds about 3/4 of the
  step's activations and logits again beyond the live tensors. With one micro-batch per
  step the gradients are None during the forward (the trainer sets them to None after
  each step): they are made in backward as the activations go, in memory those free, so
  the peak is the larger of the two phases, not their sum; the freed gradient blocks are
  the first the heap reuses. CUDA keeps its own figures (the caching allocator's slack is
  `cuda_overhead`).
- per device: DDP replicates everything (plus its gradient buckets); FSDP shards weights,
  gradients and optimizer state over the ranks and gathers one layer at a time.

Every figure is in bytes; `Estimate.terms` names each one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from tunelab import families
from tunelab.config.run_config import DEFAULT_TARGET_MODULES
from tunelab.layout import strategy_for

GIB = 2**30
ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "c_attn", "attn.c_proj")
# NF4 with double quantisation: 4 bits a weight, an 8-bit constant per 64 weights and an
# fp32 constant per 256 of those (bitsandbytes' layout).
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)
# What the CUDA context and the caching allocator take beyond the tensors themselves;
# nvidia-smi's free memory does not have it yet when a run starts.
CUDA_OVERHEAD_BYTES = 600 * 2**20
# Optimizer state bytes per trained parameter, by what the optimizer's name says.
ADAM_STATE_BYTES = 8
# TRL's fused LM head (trl.kernels.chunked_logprob): tokens and vocabulary entries per tile.
LOGIT_TILE_TOKENS = 4096
LOGIT_TILE_VOCAB = 32768
# TRL's head without Triton folds each tile with plain torch ops, whose fp32 temporaries
# (log-probs, entropy, top-1, their gradient) peak at about this many bytes per tile
# element (measured by bench/memory_estimate.py: 37-60 over three configs). Only an FSDP
# run off CUDA still uses it; other runs off CUDA use tunelab's direct head.
CPU_LOGIT_TILE_BYTES = 48
# tunelab's direct head off CUDA (worker/families/text/direct_lm_head.py): the labelled positions' logits,
# at most this many at a time; what it holds peaks at about this many bytes per logit
# (logits, their log-softmax kept for backward, the entropy's and the gradient's fp32
# temporaries; 16.3 measured at 32M logits).
DIRECT_HEAD_CHUNK_ELEMENTS = 32 * 2**20
DIRECT_HEAD_BYTES = 17
# On a CPU, resident memory beyond the live tensors that glibc's heap keeps, as a share of
# the step's activations and logits. bench/memory_estimate.py's LoRA runs (21M Llama,
# fp32, 4 x 256 to 8 x 512 tokens, checkpointing on and off) grew 0.61-0.99 x those terms
# beyond them; the same steps run alone (the worker's attention and direct head) with
# MALLOC_MMAP_THRESHOLD_=131072 (every block over 128 KiB mapped and unmapped, nothing
# kept) grew by the terms alone (301 vs 291 MiB, 156 vs 185). With 0.75 the bench's six
# configs land within 1.19x (two runs). Not measured beyond its sizes (a 21M model): a
# large model's blocks over 32 MiB are mapped and given back, so it may keep less.
CPU_HEAP_RETENTION = 0.75


class EstimateUnavailable(ValueError):
    """The model's shape cannot be read; the message says why (never a crash of a start)."""


@dataclass(frozen=True)
class Linear:
    name: str  # the module's name inside a layer (q_proj, gate_proj, ...)
    fan_in: int
    fan_out: int
    kind: str  # "attention" | "mlp"


@dataclass(frozen=True)
class ModelShape:
    """The parts of a decoder's config that decide its memory."""

    hidden: int
    intermediate: int
    layers: int
    vocab: int
    kv_width: int  # num_key_value_heads x head_dim
    linears: tuple[Linear, ...]  # one layer's linear modules (all experts counted in)
    tied_embeddings: bool
    norms_per_layer: int = 2
    mlp_saved_widths: int = 4  # intermediate-wide tensors a layer keeps (SwiGLU 4, plain GELU MLP 2)
    frozen_extra_params: int = 0  # e.g. a vision tower: loaded, not trained here

    @property
    def layer_linear_params(self) -> int:
        return sum(m.fan_in * m.fan_out for m in self.linears)

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def norm_params(self) -> int:
        return self.hidden * (self.norms_per_layer * self.layers + 1)

    @property
    def total_params(self) -> int:
        return self.layer_linear_params * self.layers + self.embedding_params + self.norm_params + self.frozen_extra_params


def _first(config: Mapping[str, Any], *names: str) -> Any:
    return next((config[n] for n in names if isinstance(config.get(n), int) and not isinstance(config.get(n), bool)), None)


def shape_from_config(config: Mapping[str, Any]) -> ModelShape:
    """A decoder's shape from its config.json (Llama-style names, or GPT-2's); a
    vision-language model's language part from its text_config, its vision tower counted
    as frozen weights."""
    if not isinstance(config, Mapping):
        raise EstimateUnavailable("the model's config.json is not a mapping")
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    hidden = _first(text, "hidden_size", "n_embd", "d_model")
    layers = _first(text, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(text, "num_attention_heads", "n_head")
    vocab = _first(text, "vocab_size") or _first(config, "vocab_size")
    if not (hidden and layers and heads and vocab):
        raise EstimateUnavailable("its config.json names no hidden size, layer count, head count and vocabulary "
                                  "that tunelab reads (Llama-style or GPT-2 names)")
    head_dim = _first(text, "head_dim") or hidden // heads
    kv_heads = _first(text, "num_key_value_heads") or heads
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    experts = _first(text, "num_local_experts", "num_experts") or 1
    if "n_embd" in text or text.get("model_type") == "gpt2":
        inner = _first(text, "n_inner") or 4 * hidden
        linears = (Linear("c_attn", hidden, 3 * hidden, "attention"), Linear("attn.c_proj", hidden, hidden, "attention"),
                   Linear("c_fc", hidden, inner, "mlp"), Linear("mlp.c_proj", inner, hidden, "mlp"))
        shape = ModelShape(hidden, inner, layers, vocab, hidden, linears, tied_embeddings=True, mlp_saved_widths=2)
    else:
        inner = _first(text, "moe_intermediate_size", "intermediate_size") or 4 * hidden
        mlp = tuple(Linear(n, i, o, "mlp") for n, i, o in
                    (("gate_proj", hidden, inner), ("up_proj", hidden, inner), ("down_proj", inner, hidden)))
        attention = (Linear("q_proj", hidden, q_width, "attention"), Linear("k_proj", hidden, kv_width, "attention"),
                     Linear("v_proj", hidden, kv_width, "attention"), Linear("o_proj", q_width, hidden, "attention"))
        expert_mlp = tuple(replace(m, fan_out=m.fan_out * experts) if m.name != "down_proj" else replace(m, fan_in=m.fan_in * experts)
                           for m in mlp) if experts > 1 else mlp
        shape = ModelShape(hidden, inner, layers, vocab, kv_width, attention + expert_mlp, tied)
    return replace(shape, frozen_extra_params=_frozen_tower_params(config))


def _frozen_tower_params(config: Mapping[str, Any]) -> int:
    """A frozen tower's weights (the sub-config a family spec names as loaded but not trained:
    the vision tower), roughly: 12 h^2 per transformer layer (attention 4 h^2, MLP 8 h^2, or
    2 h x intermediate where the config says)."""
    total = 0
    for tower in (config.get(spec.frozen_tower) for spec in families.all() if spec.frozen_tower):
        if not isinstance(tower, Mapping):
            continue
        hidden = _first(tower, "hidden_size", "embed_dim") or 0
        layers = _first(tower, "num_hidden_layers", "depth") or 0
        inner = _first(tower, "intermediate_size") or 4 * hidden
        total += layers * (4 * hidden * hidden + 2 * hidden * inner)
    return total


def read_model_config(model_name: str) -> dict[str, Any]:
    """config.json of a local model folder, or of a hub model already in the local hub
    cache (never downloaded: an estimate must not wait on the network)."""
    folder = Path(model_name).expanduser()
    try:
        found: Path | None = folder / "config.json" if (folder / "config.json").is_file() else None
    except OSError:
        found = None
    if found is None and not model_name.startswith(("/", "~", ".")):
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model_name, "config.json")
        except Exception:  # not a valid repo id: simply not cached
            cached = None
        found = Path(cached) if isinstance(cached, str) else None
    if found is None:
        raise EstimateUnavailable(f"no config.json for {model_name}: not a local model folder and not in the local hub cache")
    try:
        data = json.loads(found.read_text())
    except (OSError, ValueError) as exc:
        raise EstimateUnavailable(f"{found} cannot be read as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise EstimateUnavailable(f"{found} does not hold a JSON object")
    return data


@dataclass(frozen=True)
class Settings:
    """The run's settings that decide memory, resolved for the devices it gets."""

    training_type: str = "lora"
    load_in_4bit: bool = False
    precision: str = "bf16"  # fp32 | bf16 | fp16, as the worker resolves it
    cuda: bool = True
    batch_size: int = 2
    gradient_accumulation_steps: int = 1
    max_seq_length: int = 2048
    gradient_checkpointing: bool = True
    lora_r: int = 16
    use_dora: bool = False
    target_modules: tuple[str, ...] | None = None
    finetune_attention_modules: bool = True
    finetune_mlp_modules: bool = True
    embedding_learning_rate: bool = False
    optim: str = "adamw_torch_fused"
    world_size: int = 1
    strategy: str = "none"  # none | ddp | fsdp

    @property
    def uses_adapter(self) -> bool:
        return self.training_type in ("lora", "qlora")


def settings_for(cfg: Any, *, cuda: bool, world_size: int) -> Settings:
    """A RunConfig's settings resolved as the worker will: auto precision is bf16 on CUDA
    (fp16 only on pre-Ampere GPUs, the same size) and fp32 on a CPU; checkpointing left
    to auto is on with CUDA, off on a CPU; the strategy is layout's."""
    precision = cfg.precision if cfg.precision != "auto" else ("bf16" if cuda else "fp32")
    checkpointing = cuda if cfg.gradient_checkpointing is None else bool(cfg.gradient_checkpointing)
    strategy = strategy_for({"distributed": cfg.distributed, "training_type": cfg.training_type}, world_size)
    return Settings(
        training_type=cfg.training_type, load_in_4bit=bool(cfg.load_in_4bit), precision=precision, cuda=cuda,
        batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_seq_length=cfg.max_seq_length, gradient_checkpointing=checkpointing, lora_r=cfg.lora_r,
        use_dora=bool(cfg.use_dora), target_modules=tuple(cfg.target_modules) if cfg.target_modules else None,
        finetune_attention_modules=cfg.finetune_attention_modules, finetune_mlp_modules=cfg.finetune_mlp_modules,
        embedding_learning_rate=cfg.embedding_learning_rate is not None, optim=cfg.optim,
        world_size=max(1, world_size), strategy=strategy,
    )


@dataclass(frozen=True)
class Term:
    name: str
    bytes: int
    note: str


@dataclass(frozen=True)
class Estimate:
    """Peak memory of one device (one rank) and what it is made of."""

    terms: tuple[Term, ...]
    settings: Settings
    total_params: int
    trainable_params: int
    notes: tuple[str, ...] = field(default=())

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    def term(self, name: str) -> int:
        return sum(t.bytes for t in self.terms if t.name == name)

    @property
    def tensor_bytes(self) -> int:
        """What torch.cuda.max_memory_allocated would count (no context or allocator slack)."""
        return self.total_bytes - self.term("cuda_overhead")

    def as_dict(self) -> dict[str, Any]:
        s = self.settings
        return {
            "total_bytes": self.total_bytes, "total_gib": round(self.total_bytes / GIB, 3),
            "terms": [{"name": t.name, "bytes": t.bytes, "gib": round(t.bytes / GIB, 3), "note": t.note} for t in self.terms],
            "total_params": self.total_params, "trainable_params": self.trainable_params,
            "per_device": {"devices": s.world_size, "strategy": s.strategy, "cuda": s.cuda},
            "resolved": {"precision": s.precision, "gradient_checkpointing": s.gradient_checkpointing,
                         "batch_size": s.batch_size, "gradient_accumulation_steps": s.gradient_accumulation_steps},
            "notes": list(self.notes),
        }


def _optimizer_bytes(optim: str) -> tuple[float, str]:
    name = optim.lower()
    if "8bit" in name or "8_bit" in name:
        return (1.0 if "lion" in name else 2.0), f"{optim}: 8-bit states"
    if "lion" in name:
        return 4.0, f"{optim}: one fp32 moment"
    if name.startswith("sgd"):
        return 0.0, f"{optim}: no state (no momentum)"
    if "adafactor" in name:
        return 0.1, f"{optim}: factored second moments (small)"
    note = f"{optim}: two fp32 moments" if "adam" in name else f"{optim}: counted as AdamW (two fp32 moments)"
    return float(ADAM_STATE_BYTES), note


def _targeted(shape: ModelShape, s: Settings) -> list[Linear]:
    if s.target_modules and list(s.target_modules) != ["all-linear"]:
        return [m for m in shape.linears if m.name in s.target_modules or m.name.rsplit(".", 1)[-1] in s.target_modules]
    kinds = {k for k, on in (("attention", s.finetune_attention_modules), ("mlp", s.finetune_mlp_modules)) if on}
    defaults = set(DEFAULT_TARGET_MODULES)
    picked = [m for m in shape.linears if m.kind in kinds and (m.name in defaults or not defaults & {x.name for x in shape.linears})]
    return picked


def _activation_elements_per_token(shape: ModelShape, s: Settings) -> tuple[int, int]:
    """(saved elements of one layer, of the rest of the model) for one token."""
    layer = (2 * shape.norms_per_layer + 2) * shape.hidden + 2 * shape.kv_width + shape.mlp_saved_widths * shape.intermediate
    if s.uses_adapter:
        layer += len(_targeted(shape, s)) * s.lora_r  # each adapter's A output, kept for B
    return layer, 4 * shape.hidden  # embedding output, final norm in/out, head input


def estimate(shape: ModelShape, s: Settings) -> Estimate:
    """Peak memory of one device training `shape` with settings `s`."""
    half = 2 if s.precision in ("bf16", "fp16") else 4
    act = half
    world = s.world_size
    fsdp = s.strategy == "fsdp" and world > 1
    ddp = s.strategy == "ddp" and world > 1
    shard = world if fsdp else 1
    terms: list[Term] = []
    notes: list[str] = []
    linear_params = shape.layer_linear_params * shape.layers
    other_params = shape.embedding_params + shape.norm_params + shape.frozen_extra_params

    # --- weights
    if s.load_in_4bit:
        quant = int(linear_params * NF4_BYTES_PER_WEIGHT)
        terms.append(Term("weights", quant, f"{linear_params:,} linear weights in 4-bit NF4 with double-quantised constants"))
        terms.append(Term("weights_unquantized", other_params * 4,
                          f"{other_params:,} embedding, head and norm weights, upcast to fp32 for k-bit training"))
        terms.append(Term("dequantize_buffer", max(m.fan_in * m.fan_out for m in shape.linears) * half,
                          "one linear weight dequantised at a time"))
    else:
        per_param = half if s.uses_adapter else 4
        dtype = {2: "bf16/fp16", 4: "fp32"}[per_param]
        why = "frozen base, loaded in the compute type" if s.uses_adapter else "trained weights stay fp32"
        total_weights = shape.total_params * per_param
        terms.append(Term("weights", total_weights // shard,
                          f"{shape.total_params:,} parameters in {dtype} ({why})" + (f", sharded over {world} ranks" if fsdp else "")))

    # --- what trains
    if s.uses_adapter:
        targets = _targeted(shape, s)
        lora = sum(s.lora_r * (m.fan_in + m.fan_out) for m in targets) * shape.layers
        dora = sum(m.fan_out for m in targets) * shape.layers if s.use_dora else 0
        whole = shape.embedding_params if s.embedding_learning_rate else 0
        trainable = lora + dora + whole
        names = ", ".join(sorted({m.name for m in targets})) or "none"
        terms.append(Term("adapter", (lora + dora) * 4 // shard,
                          f"LoRA r={s.lora_r} on {names} x {shape.layers} layers ({lora:,} parameters, fp32)"
                          + (f"; DoRA magnitudes {dora:,}" if dora else "")))
        if whole:
            terms.append(Term("trained_embeddings", whole * 4 // shard,
                              f"embeddings and head trained whole ({whole:,} parameters, a trainable fp32 copy)"))
        if s.use_dora:
            widest = max((m.fan_in * m.fan_out for m in targets), default=0)
            terms.append(Term("dora_norm_buffer", widest * 4, "the weight norm DoRA takes, one full-precision weight at a time"))
    else:
        trainable = shape.total_params - shape.frozen_extra_params
        if half == 2 and s.cuda:
            # Autocast casts each fp32 weight to the half type once per forward and keeps the cast.
            terms.append(Term("autocast_weight_copies", trainable * 2 // shard, "half-precision copies autocast keeps during a forward pass"))
    terms.append(Term("gradients", trainable * 4 // shard, f"one fp32 gradient per trained parameter ({trainable:,})"))
    per_state, optim_note = _optimizer_bytes(s.optim)
    terms.append(Term("optimizer", int(trainable * per_state) // shard, optim_note + (f", sharded over {world} ranks" if fsdp else "")))
    if ddp:
        terms.append(Term("ddp_buckets", trainable * 4, "DDP's gradient buckets (a second copy of the trained gradients)"))
    if fsdp:
        largest = shape.layer_linear_params * (half if s.uses_adapter else 4)
        terms.append(Term("fsdp_gather", 2 * largest, "one layer gathered whole, plus the next one prefetched"))

    # --- activations
    tokens = s.batch_size * s.max_seq_length
    layer, rest = _activation_elements_per_token(shape, s)
    if s.gradient_checkpointing:
        saved = tokens * (shape.layers * shape.hidden + layer + rest) * act
        how = f"checkpointed: {shape.layers} layer inputs kept, one layer recomputed at a time"
    else:
        saved = tokens * (shape.layers * layer + rest) * act
        how = f"{shape.layers} layers x {layer:,} saved values per token"
    terms.append(Term("activations", saved, f"micro-batch {s.batch_size} x {s.max_seq_length} tokens, {how}"))
    terms.append(_logits_term(s, shape.vocab, tokens, act))
    if s.cuda:
        terms.append(Term("cuda_overhead", CUDA_OVERHEAD_BYTES, "CUDA context and allocator slack (not in max_memory_allocated)"))
    else:
        terms = _resident_on_a_cpu(terms, s)
        notes.append("on a CPU the process also holds the Python libraries (about 1 GiB resident) beyond these terms")
    return Estimate(tuple(terms), s, shape.total_params, trainable, tuple(notes))


def _resident_on_a_cpu(terms: list[Term], s: Settings) -> list[Term]:
    """The CPU's resident peak: the heap's retained blocks added, and the gradients counted
    only beyond the forward and backward's peak where the two do not coexist (one
    micro-batch per step on one process; accumulated or bucketed gradients stay whole)."""
    step = sum(t.bytes for t in terms if t.name in ("activations", "logits"))
    grads = next(t for t in terms if t.name == "gradients")
    apart = s.gradient_accumulation_steps == 1 and s.world_size == 1
    # The blocks the previous step's gradients freed are the first the heap hands out again.
    retained = max(0, int(CPU_HEAP_RETENTION * step) - (grads.bytes if apart else 0))
    heap = Term("heap_retention", retained,
                f"freed blocks glibc's heap keeps for reuse (about {CPU_HEAP_RETENTION:.0%} of the activations and "
                "logits, measured)" + (", less the previous step's gradient blocks it reuses first" if apart else ""))
    if apart:
        beyond = max(0, grads.bytes - step - retained)
        grads = replace(grads, bytes=beyond, note=grads.note + "; set to None between steps, they are made in "
                        "backward in the memory the activations free, so only what exceeds that peak counts")
    return [grads if t.name == "gradients" else t for t in terms] + [heap]


def _logits_term(s: Settings, vocab: int, tokens: int, act: int) -> Term:
    """What the LM head holds at once: never all of a micro-batch's logits."""
    what = f"LM head logits of micro-batch {s.batch_size} x {s.max_seq_length} tokens x {vocab:,} vocab"
    if s.cuda or s.strategy == "fsdp":
        # TRL's fused head projects tiles of up to 4,096 tokens x 32,768 vocabulary
        # entries and folds each into the loss (recomputing it in backward).
        tile = min(tokens, LOGIT_TILE_TOKENS) * min(vocab, LOGIT_TILE_VOCAB)
        return Term("logits", tile * (act + 4 if s.cuda else CPU_LOGIT_TILE_BYTES),
                    f"{what}, in tiles of at most {LOGIT_TILE_TOKENS:,} tokens x {LOGIT_TILE_VOCAB:,} vocab"
                    + ("" if s.cuda else " (the CPU's torch path keeps several fp32 copies of a tile)"))
    held = min(tokens, max(1, DIRECT_HEAD_CHUNK_ELEMENTS // vocab)) * vocab  # one chunk of positions
    return Term("logits", held * DIRECT_HEAD_BYTES,
                f"{what}, at most {DIRECT_HEAD_CHUNK_ELEMENTS // 2**20}M logits at a time "
                "(tunelab's direct head: fp32 log-softmax kept for backward, its temporaries)")
