"""Loading the model and tokenizer, and wrapping the model for the chosen training method.

Device-aware defaults, because the library defaults suit GPUs and hurt CPUs: on a CPU
a run trains without gradient checkpointing (memory is rarely short there, and the
recomputation costs 1.35-1.8x), in fp32 — or, on a CPU with native bf16 (AVX512-BF16 or
AMX) and a model whose matrices are at least `BF16_MIN_HIDDEN` wide, with bf16 autocast
(about 1.8x faster there; narrower models lose more to casting than they gain, the
demo's tiny Llama 1.4x). With CUDA it uses bf16 from Ampere on, else fp16,
and checkpointing unless the config turns it off. `precision` overrides.
Packed runs attend per example (`packed_attention` on CPU, FlashAttention-2 or flex
attention on CUDA), which is what makes packing pay off. The GPU itself is chosen by the parent through CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tunelab.config.run_config import DEFAULT_TARGET_MODULES
from tunelab.worker.context import RunSettingError

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


# Narrowest hidden size at which bf16 autocast beats fp32 on a bf16-capable CPU (measured:
# hidden 128 is 1.4x slower in bf16, hidden 256 1.8x faster).
BF16_MIN_HIDDEN = 256


class SetupError(RunSettingError):
    """A model or machine setting that cannot be honoured (field + fix in the message)."""


@dataclass(frozen=True)
class DeviceSettings:
    cuda: bool
    precision: str  # fp32 | bf16 | fp16: the mixed-precision mode the trainer runs in
    gradient_checkpointing: bool
    capability: tuple[int, int] | None = None  # the CUDA device's compute capability

    @property
    def load_dtype(self) -> Any:
        """Frozen base weights of adapter runs load in the half type to save memory;
        trained weights stay fp32 so the optimizer updates them exactly."""
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision, torch.float32)


def cuda_precision(capability: tuple[int, int]) -> str:
    """bf16 from Ampere (compute capability 8.0) on; fp16 before it. T4 and V100 answer
    yes to `torch.cuda.is_bf16_supported()` through emulation, which is slow."""
    return "bf16" if capability >= (8, 0) else "fp16"


def device_settings(config: WorkerConfig) -> DeviceSettings:
    cuda = torch.cuda.is_available()
    precision = config.precision
    if precision == "auto":
        precision = cuda_precision(tuple(torch.cuda.get_device_capability())) if cuda else "fp32"
    if precision == "fp16" and not cuda:
        raise SetupError("precision", "fp16 training needs a CUDA GPU; use precision=fp32 (or bf16) on this machine")
    checkpointing = config.gradient_checkpointing
    return DeviceSettings(cuda=cuda, precision=precision, gradient_checkpointing=cuda if checkpointing is None else bool(checkpointing),
                          capability=tuple(torch.cuda.get_device_capability()) if cuda else None)


def native_cpu_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (otherwise bf16 is emulated, and slow)."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # torch's own CPU feature checks
    return any(getattr(torch.cpu, probe, lambda: False)() for probe in probes)


def settle_cpu_precision(config: WorkerConfig, device: DeviceSettings, model: Any) -> DeviceSettings:
    """The automatic CPU precision, once the model is known: bf16 autocast where the CPU
    and the model's width make it pay (the weights load in fp32; an adapter run's frozen
    linear weights then go to bf16, `store_frozen_linears_in_bf16`), else fp32."""
    if device.cuda or config.precision != "auto":
        return device
    model_config = getattr(model, "config", None)
    # A vision-language model's width is its language model's (the text sub-config).
    text_config = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    hidden = getattr(text_config, "hidden_size", 0) or 0
    if hidden >= BF16_MIN_HIDDEN and native_cpu_bf16():
        return replace(device, precision="bf16")
    return device


def store_frozen_linears_in_bf16(config: WorkerConfig, device: DeviceSettings, model: Any) -> int:
    """Where `settle_cpu_precision` chose bf16 autocast after the model loaded in fp32, cast
    the frozen linear weights of an adapter run to bf16 once, after the adapter is attached
    (its own weights are drawn in fp32, as they would be without this); return how many
    layers were cast.

    Autocast casts every fp32 weight of a linear layer to bf16 at each forward pass, and
    the fp32 weights stay resident beside the copies (pages of the loaded file's memory map,
    all read once the first step has run). Cast once, a weight already in bf16 goes to the
    matrix multiply unchanged, with the same rounding, so every step computes the same
    numbers (tests/worker/test_bf16_frozen_linears.py: equal losses over several optimizer
    steps); the fp32 weights are gone: 0.4 GiB less at peak for SmolLM2-135M. Only what
    autocast would cast anyway is cast: plain linear layers whose weight is frozen. The
    weights an embedding shares (a tied output head), norms and every other parameter stay
    fp32, in a copy of their own, so the file's map can go. Runs that re-derive something
    from the base weights as they train (DoRA's weight norms, LoftQ) keep theirs as loaded,
    and so does every objective but supervised fine-tuning: the ones that generate (GRPO)
    call the model outside the trainer's autocast too.
    """
    if (device.cuda or device.precision != "bf16" or config.precision != "auto" or config.objective != "sft"
            or config.training_type != "lora" or config.use_dora or config.use_loftq):
        return 0
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    shared = {id(embeddings.weight)} if embeddings is not None else set()
    layers = [module for module in model.modules()
              if type(module) is torch.nn.Linear and module.weight.dtype == torch.float32
              and not module.weight.requires_grad and id(module.weight) not in shared]
    for layer in layers:
        layer.to(torch.bfloat16)
    if layers:
        for parameter in model.parameters():
            if parameter.dtype == torch.float32 and not parameter.requires_grad:
                parameter.data = parameter.data.clone()  # off the file's map, which can then be unmapped
    return len(layers)


def load_tokenizer(config: WorkerConfig) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        config.model_name, token=config.hf_token or None, trust_remote_code=config.trust_remote_code
    )
    if tokenizer.pad_token is None:
        # Padding positions are masked out of the loss, so any known token can stand in.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if tokenizer.pad_token is None:
        raise SetupError("model_name", "the tokenizer has no pad, eos or unk token to pad batches with; use a model whose tokenizer defines one")
    tokenizer.padding_side = "right"
    return tokenizer


def load_model(config: WorkerConfig, device: DeviceSettings, auto_class: Any = None, padding_free: bool = False) -> Any:
    """The model through `auto_class` (AutoModelForCausalLM unless a family names another);
    `padding_free`: it will train on padding-free batches (see `padding_free_batches`)."""
    from transformers import AutoModelForCausalLM

    auto_class = auto_class or AutoModelForCausalLM

    kwargs: dict[str, Any] = {
        "token": config.hf_token or None,
        "trust_remote_code": config.trust_remote_code,
        "dtype": device.load_dtype if config.training_type in ("lora", "qlora") else torch.float32,
    }
    if config.load_in_4bit:
        if not device.cuda:
            raise SetupError("load_in_4bit", "4-bit loading (QLoRA) needs a CUDA GPU and none is visible; use training_type=lora with load_in_4bit=false")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float16 if device.precision == "fp16" else torch.bfloat16,
        )
        kwargs["device_map"] = {"": torch.cuda.current_device()}  # each rank its own GPU (rank_entry sets it)
    attention = attention_for(config, device, padding_free)
    try:
        model = auto_class.from_pretrained(config.model_name, **kwargs, **attention)
    except ValueError:
        if not attention:
            raise
        # A model class without pluggable attention (some remote code): its own default it is.
        model = auto_class.from_pretrained(config.model_name, **kwargs)
    # The KV cache is useless while training and warns with gradient checkpointing.
    model.config.use_cache = False
    return model


def padding_free_batches(config: WorkerConfig, device: DeviceSettings) -> bool:
    """Whether a text SFT run's micro-batches go without padding: on a CPU without packing,
    each micro-batch's rows are laid end to end (TRL's `padding_free`) and `packed_attention`
    keeps every row to itself. The same rows, labels and loss as a padded batch, without
    the compute spent on padding (half or more of a batch of chat rows of mixed lengths).
    On CUDA padded batches stay (dense kernels are cheap there; packing is the choice)."""
    return (not device.cuda and not config.packing and config.objective == "sft"
            and config.batch_size > 1)


def attention_for(config: WorkerConfig, device: DeviceSettings, padding_free: bool = False) -> dict[str, Any]:
    """Packed (and padding-free) runs attend per example without a dense mask over the
    flattened batch (which sdpa builds: quadratic in batch x length, and no flash kernel):
    on CPU through `packed_attention`, on CUDA through `cuda_packed_attention`. Everything
    else keeps the library's default attention."""
    if not config.packing and not padding_free:
        return {}
    if device.cuda:
        flash_installed = importlib.util.find_spec("flash_attn") is not None
        return {"attn_implementation": cuda_packed_attention(device.capability or (0, 0), flash_installed)}
    from tunelab.worker.families.text import packed_attention

    return {"attn_implementation": packed_attention.register()}


def cuda_packed_attention(capability: tuple[int, int], flash_attn_installed: bool) -> str:
    """FlashAttention-2's variable-length kernel where flash-attn is installed and the GPU
    is Ampere or newer (its minimum); otherwise PyTorch's flex attention, whose block mask
    skips the blocks between examples. A model class that takes neither falls back to
    its default (see load_model); the setup message says which one the run got."""
    return "flash_attention_2" if flash_attn_installed and capability >= (8, 0) else "flex_attention"


def default_target_modules(model: Any) -> list[str] | str:
    """All attention and MLP projections the model has; PEFT's "all-linear" for other layouts."""
    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    present = [m for m in DEFAULT_TARGET_MODULES if m in names]
    return present or "all-linear"


def wrap_for_training(model: Any, config: WorkerConfig, device: DeviceSettings, targets: list[str] | None = None,
                      task_type: str | None = "CAUSAL_LM") -> Any:
    """LoRA-family adapters for lora/qlora; full fine-tuning and continued pretraining train every weight.
    `targets` (the family's choice from the finetune_* switches) stands in for the default
    targets; an explicit `target_modules` overrides both. `task_type` picks PEFT's wrapper
    (None: the plain one, which passes every input through to the model unchanged)."""
    if config.training_type not in ("lora", "qlora"):
        for parameter in model.parameters():
            parameter.requires_grad_(True)
        return model
    from peft import LoftQConfig, LoraConfig, get_peft_model, prepare_model_for_kbit_training

    quantized = config.load_in_4bit
    if quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=device.gradient_checkpointing,
                                                gradient_checkpointing_kwargs={"use_reentrant": False})
    elif device.gradient_checkpointing:
        # Checkpointed blocks need an input that requires grad, or the frozen base cuts the graph.
        model.enable_input_require_grads()
    loftq = config.use_loftq
    if loftq and not device.cuda:
        raise SetupError("use_loftq", "PEFT's LoftQ initialisation runs its quantisation on a CUDA GPU and none is visible; remove use_loftq on this machine")
    targets = config.target_modules or targets or default_target_modules(model)
    whole = {}
    if config.embedding_learning_rate is not None:
        from tunelab.worker.families.embedding.rate import modules_to_save, ties_embeddings

        # The embeddings and head train whole beside the adapter, at their own rate.
        whole = {"modules_to_save": modules_to_save(model), "ensure_weight_tying": ties_embeddings(model)}
    lora = LoraConfig(
        task_type=task_type,
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
        bias="none",
        use_rslora=config.use_rslora,
        use_dora=config.use_dora,
        **whole,
        # LoftQ on an unquantized model quantizes inside PEFT; a 4-bit model gets it below.
        **({"init_lora_weights": "loftq", "loftq_config": LoftQConfig(loftq_bits=4)} if loftq and not quantized else {}),
    )
    try:
        model = get_peft_model(model, lora)
    except ValueError as exc:  # e.g. target modules that do not exist in this model
        raise SetupError("target_modules", f"{exc}; list module names this model has") from exc
    if loftq and quantized:
        from peft import replace_lora_weights_loftq

        replace_lora_weights_loftq(model, model_path=loftq_weights_path(config))
    return model


def loftq_weights_path(config: WorkerConfig) -> str | None:
    """Where PEFT's LoftQ replacement reads the unquantised weights: a local model folder
    must be named (PEFT finds only hub downloads by itself), and must hold safetensors,
    the only format PEFT can read lazily; None for a hub id."""
    folder = Path(config.model_name).expanduser()
    if not folder.is_dir():
        return None
    if not any(folder.glob("*.safetensors")):
        raise SetupError("use_loftq", f"LoftQ on a 4-bit base reads the original weights from safetensors files and {folder} has none; save the model with safetensors or remove use_loftq")
    return str(folder)


def count_parameters(model: Any) -> tuple[int, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())
