"""RunConfig: every setting of one fine-tuning run, its defaults and its validation.

This module alone decides what a valid run is, for YAML/JSON files and API bodies alike,
and splits secrets from the `public` form that is stored. It never imports torch:
hardware facts come in through `check_machine`. Its helpers, one job each:
  config_text     the name, path and secret field types (plain text, sane lengths)
  config_errors   FieldError / ConfigError, and pydantic's errors turned into them
  config_checks   cross-field refusals: the finetune_* switches, the mlx backend's limits,
                  several devices where some are MIG slices; check_machine
  config_files    a config from a YAML/JSON file and --set overrides, and back to YAML
  config_resume   a stored run's config made runnable again, with its secrets
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tunelab.config.preference import BETA_HELP, OBJECTIVE_HELP, Objective, objective_errors
from tunelab.config.grpo import (MAX_COMPLETION_LENGTH_HELP, NUM_GENERATIONS_HELP, REWARDS_HELP, TEMPERATURE_HELP, RewardSpec,
                                   grpo_errors)
from tunelab.config.embedding import EMBEDDING_LOSS_HELP, MATRYOSHKA_HELP, EmbeddingLoss, loss_fits, loss_format_error, normalise_matryoshka_dims
# FINETUNE_SWITCHES, MLX_LR_SCHEDULERS, ConfigError, FieldError and the text field types are
# also this module's interface: the rest of tunelab imports them from here.
from tunelab.config.checks import FINETUNE_SWITCHES, MLX_LR_SCHEDULERS, check_machine, finetune_switch_errors, mlx_limits  # noqa: F401
from tunelab.config.errors import (ConfigError, ErrorList, FieldError, cross_problems_beside, errors_from_validation,  # noqa: F401
                                   rebuilt_error, unknown_key_error)
from tunelab.config.export_after import EXPORT_AFTER_HELP, export_after_errors, export_after_format
from tunelab.layout import layout_errors
from tunelab.remote_code.check import HELP as REMOTE_CODE_HELP, fingerprint_errors
from tunelab.config.text import DisplayName, Name, PathText, Secret

TrainingType = Literal["lora", "qlora", "full", "continued_pretraining"]
DataFormat = Literal["auto", "alpaca", "sharegpt", "chatml", "text", "caption", "pairs", "triplets", "scored_pairs", "labelled_pairs",
                     "transcription", "preference", "unpaired_preference", "prompt_only"]
Backend = Literal["auto", "torch", "mlx"]
ReportTo = Literal["none", "tensorboard", "wandb", "mlflow"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
Distributed = Literal["auto", "ddp", "fsdp"]
MemoryFit = Literal["refuse", "auto", "off"]

SECRET_FIELDS = ("hf_token", "wandb_token")
S3_SECRET_FIELDS = ("access_key_id", "secret_access_key", "session_token")
# The stored config notes which secrets a run used (never their values), so a resume
# knows what it must be given again: in its request, or in these environment variables.
SECRETS_USED_KEY = "secrets_used"
SECRET_ENVIRONMENT = {
    "hf_token": "HF_TOKEN", "wandb_token": "WANDB_API_KEY", "s3.access_key_id": "AWS_ACCESS_KEY_ID",
    "s3.secret_access_key": "AWS_SECRET_ACCESS_KEY", "s3.session_token": "AWS_SESSION_TOKEN",
}
# Canonical column names a dataset's own columns can be mapped onto.
CANONICAL_COLUMNS = ("instruction", "input", "output", "text", "conversations", "messages", "system", "images", "image",
                     "anchor", "positive", "negative", "sentence1", "sentence2", "score", "query", "document", "label",
                     "prompt", "chosen", "rejected", "completion", "reference")
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Upper bounds on counts: far above any real run, low enough that a typo cannot make a
# worker allocate without limit.
MAX_BATCH_SIZE = 4096
MAX_ACCUMULATION_STEPS = 4096
MAX_EPOCHS = 10_000
MAX_STEPS = 100_000_000
MAX_ROWS = 10**12
MAX_SEED = 2**32 - 1


class S3Source(BaseModel):
    """A dataset stored in S3 (or an S3-compatible store)."""

    model_config = ConfigDict(extra="forbid")
    bucket: Name
    prefix: PathText = ""
    region: Name | None = None
    endpoint_url: PathText | None = None
    access_key_id: Secret | None = None
    secret_access_key: Secret | None = None
    session_token: Secret | None = None

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> "S3Source":
        # One half of a key pair would make boto3 refuse to build a client at all, deep in
        # the worker; say here which half is missing.
        if (self.access_key_id is None) != (self.secret_access_key is None):
            given, missing = (("access_key_id", "secret_access_key") if self.secret_access_key is None
                              else ("secret_access_key", "access_key_id"))
            raise ValueError(f"{given} is set but {missing} is not: give both, or neither to use the machine's "
                             "own AWS credentials")
        return self


class NodesConfig(BaseModel):
    """Several machines without a cluster manager: torchrun's own multi-node settings.

    Every node runs the same config with its own `node_rank`; node 0 (the head) records
    the run, streams progress and takes stop requests, the others only train."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(ge=2, le=4096, description="How many machines take part (torchrun --nnodes).")
    node_rank: int = Field(0, ge=0, le=4095, description="This machine's rank; 0 is the head (torchrun --node-rank).")
    master_addr: Name | None = Field(None, description="The head's address every node can reach (torchrun --master-addr).")
    master_port: int = Field(29500, ge=1, le=65535, description="The head's rendezvous port (torchrun --master-port).")
    rdzv_endpoint: Name | None = Field(None, description="host:port of the head's rendezvous, instead of master_addr/master_port (a static rendezvous: global ranks follow node_rank).")
    join_timeout_s: float = Field(300, ge=1, le=86400, description="How long the nodes wait for each other before the run fails.")


class RunConfig(BaseModel):
    """Everything one run needs. Field docs double as the CLI/API reference."""

    # defer_build: its validator is made by the first config parsed, not by every import
    # (`tunelab serve` answers sooner; the API's StartRequest is built by FastAPI anyway).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False, defer_build=True)

    # --- model
    model_name: PathText = Field(min_length=1, description="Hub id (org/name) or a local model folder.")
    training_type: TrainingType = Field("lora", description="lora | qlora | full | continued_pretraining.")
    objective: Objective = Field("sft", description=OBJECTIVE_HELP)
    beta: float | None = Field(None, gt=0, le=1000, description=BETA_HELP)
    rewards: list[RewardSpec] = Field(default_factory=list, max_length=64, description=REWARDS_HELP)
    num_generations: int | None = Field(None, ge=2, le=1024, description=NUM_GENERATIONS_HELP)
    max_completion_length: int | None = Field(None, ge=1, le=1_048_576, description=MAX_COMPLETION_LENGTH_HELP)
    temperature: float | None = Field(None, gt=0, le=100, description=TEMPERATURE_HELP)
    max_seq_length: int = Field(2048, ge=16, le=1_048_576, description="Longest tokenized example; longer rows are truncated.")
    load_in_4bit: bool = Field(False, description="Load the base model in 4-bit (QLoRA). Needs CUDA.")
    trust_remote_code: bool = Field(False, description="Allow the model's own code (its auto_map files) to run. Over HTTP it needs "
                                    "`tunelab serve --allow-remote-code`, and without approved_remote_code_fingerprint "
                                    "also --allow-unpinned-remote-code.")
    approved_remote_code_fingerprint: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(None, description=REMOTE_CODE_HELP)
    hf_token: Secret | None = Field(None, description="Hub token (secret; never stored).")

    # --- data
    dataset: PathText | None = Field(None, description="Hub dataset id.")
    local_datasets: list[PathText] = Field(default_factory=list, description="Local .json/.jsonl/.csv/.parquet files.")
    s3: S3Source | None = Field(None, description="S3 bucket/prefix holding data files.")
    subset: Name | None = Field(None, description="Hub dataset configuration name.")
    train_split: Name = Field("train", min_length=1)
    eval_split: Name | None = Field(None, description="Split used for evaluation; auto-detected when absent.")
    local_eval_datasets: list[PathText] = Field(default_factory=list)
    eval_holdout: float = Field(0.0, ge=0.0, le=0.5, description="Share of training rows held out for eval when no eval split exists.")
    eval_steps: float = Field(0, ge=0, le=MAX_STEPS, description="0 = no eval; >= 1 every N steps; < 1 a fraction of total steps.")
    streaming: bool = False
    slice_start: int | None = Field(None, ge=0, le=MAX_ROWS)
    slice_end: int | None = Field(None, ge=1, le=MAX_ROWS)
    format: DataFormat = Field("auto", description="auto | alpaca | sharegpt | chatml | text | caption (an image column and a text column); "
                               "for embedding models pairs (anchor, positive) | triplets (anchor, positive, negative) | "
                               "scored_pairs (sentence1, sentence2, score) | labelled_pairs (query, document, label); "
                               "for speech-to-text models transcription (an audio column and a transcript column); "
                               "for objective dpo/orpo/simpo/kto preference (prompt, chosen, rejected: strings or chat messages lists; "
                               "the prompt may be the turns chosen and rejected open with, or LLaMA-Factory's conversations column); "
                               "for kto also unpaired_preference (prompt, completion, label, or LLaMA-Factory's messages and a true/false label); "
                               "for objective grpo prompt_only (a prompt column: strings or chat messages, and an optional reference or answer column).")
    column_mapping: dict[Name, Name] = Field(default_factory=dict, description="Canonical column -> dataset column, e.g. {instruction: question}.")
    role_mapping: dict[Name, Name] = Field(default_factory=dict, description="Dataset role -> chat role, e.g. {function_call: tool}.")
    train_on_completions: bool = Field(False, description="Compute loss on assistant tokens only.")

    # --- adapter
    lora_r: int = Field(16, ge=1, le=4096)
    lora_alpha: float = Field(16, gt=0, le=1_000_000)
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[Name] | None = Field(None, description="Default: all attention and MLP projections.")
    use_rslora: bool = False
    use_dora: bool = Field(False, description="DoRA: LoRA with a learned magnitude per output. Each step costs more than LoRA (1.3x on a small CPU model); on a 4-bit base (QLoRA) every forward pass dequantises each adapted weight to take its norm, which costs extra time and a full-precision copy of one weight at a time.")
    use_loftq: bool = False
    gradient_checkpointing: bool | None = Field(None, description="None = device-aware default: off on a CPU; on a GPU off where the memory estimate fits without it (it recomputes every layer in backward), else on.")

    # --- vision-language models (detected from the model's config; text models ignore the vision switch).
    # The finetune_* switches choose the adapter's targets, or for full fine-tuning the weights that train.
    vision_image_size: int = Field(512, ge=16, le=16384, description="Longest side, in pixels, every image is shrunk to (aspect kept) before the processor sees it.")
    finetune_vision_layers: bool = Field(True, description="Train the vision tower and its projector into the language model (adapter targets, or weights in full fine-tuning).")
    finetune_language_layers: bool = Field(True, description="Train the language model's layers (with its embeddings and output head in full fine-tuning).")
    finetune_attention_modules: bool = Field(True, description="Train attention projections (q/k/v/o and the like).")
    finetune_mlp_modules: bool = Field(True, description="Train MLP / feed-forward projections (and other linear layers outside attention, e.g. a vision projector).")
    skip_bad_images: bool = Field(False, description="Skip rows whose image is missing, unreadable or not an image (counted and reported before training) instead of ending the run; a path outside the data roots is still refused.")

    # --- embedding models (detected from the model's files; generative models ignore these)
    embedding_loss: EmbeddingLoss = Field("auto", description=EMBEDDING_LOSS_HELP)
    matryoshka_dims: list[int] | None = Field(None, description=MATRYOSHKA_HELP)

    # --- speech-to-text models (detected from the model's config)
    speech_language: Name | None = Field(None, max_length=40, description="Language of the transcripts for a multilingual speech model (e.g. en or english): Whisper's labels, its eval transcripts and its saved generation_config start with this language's token. None: the language its tokenizer was saved with, else the one the model detects in the first training clips.")
    skip_bad_audio: bool = Field(False, description="Skip rows whose audio is missing, unreadable, empty or longer than the model takes (counted and reported before training) instead of ending the run; a path outside the data roots is still refused.")
    finetune_audio_layers: bool = Field(False, description="Audio chat models (Qwen2-Audio) only: train the audio tower and its projector too (adapter targets, or weights in full fine-tuning). Off: only the language model trains, on the pretrained encoder's features.")

    # --- text-to-speech models (Orpheus-style: detected from the model's config or tokenizer)
    tts_codec: PathText | None = Field(None, description="The SNAC codec a text-to-speech model speaks through: a folder with SNAC's config.json and pytorch_model.bin, or a hub repo. None: the model folder's codec/ subfolder (tunelab saves one with every TTS model), else hubertsiuzdak/snac_24khz. Orpheus-style models only: a Sesame CSM model speaks through the Mimi codec inside it.")
    tts_sample_text: Name | None = Field(None, max_length=500, description="The sentence a text-to-speech run speaks at each eval into samples/step-N.wav (the page plays it). None: the first eval row's text.")

    # --- optimisation
    num_epochs: float = Field(3, ge=0, le=MAX_EPOCHS)
    max_steps: int = Field(0, ge=0, le=MAX_STEPS, description="0 = train for num_epochs.")
    learning_rate: float = 2e-4
    embedding_learning_rate: float | None = Field(
        None, gt=0, le=1.0,
        description="Own learning rate for the input embeddings and output head (embed_tokens / lm_head), usually 2-10x below "
                    "learning_rate, for continued pretraining on a new domain or language. With lora/qlora those two modules "
                    "are then trained whole and saved with the adapter. Empty: they train at learning_rate (or not at all with lora).")
    batch_size: int = Field(2, ge=1, le=MAX_BATCH_SIZE, description="Rows per device per step; at most the number of training rows.")
    gradient_accumulation_steps: int = Field(4, ge=1, le=MAX_ACCUMULATION_STEPS)
    warmup_steps: int | None = Field(None, ge=0, le=MAX_STEPS)
    warmup_ratio: float | None = Field(None, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.001, ge=0.0)
    max_grad_norm: float = Field(1.0, description="Gradient clip; 0 or negative disables clipping.")
    max_grad_value: float | None = Field(None, description="Clip every gradient element to ±this value, after max_grad_norm and before the optimizer step (mixed precision: on the unscaled gradients). Empty or 0: off. The logged grad_norm stays the norm before any clipping.")
    max_grad_leaf_norm: float | None = Field(None, description="Clip each parameter's gradient to this norm on its own, after max_grad_norm and before max_grad_value. Empty or 0: off.")
    lr_scheduler_type: Name = "linear"
    optim: Name = Field("adamw_torch_fused", description="Any HF Trainer optimizer name; the default is fused AdamW, as in transformers.")
    seed: int = Field(3407, ge=0, le=MAX_SEED, description="0 to 2**32-1.")
    packing: bool = False
    save_steps: int = Field(0, ge=0, le=MAX_STEPS, description="0 = save only at the end.")
    save_total_limit: int | None = Field(None, ge=1, le=100_000)
    logging_steps: int = Field(1, ge=1, le=MAX_STEPS)
    precision: Precision = Field("auto", description="auto picks bf16 on capable GPUs; on a CPU fp32, or bf16 autocast where the CPU has native bf16 and the model is at least 256 wide.")

    # --- tracking
    report_to: ReportTo = "none"
    wandb_project: Name | None = None
    wandb_token: Secret | None = None
    tensorboard_dir: PathText | None = None
    mlflow_tracking_uri: PathText | None = None
    mlflow_experiment: Name | None = None

    # --- hardware
    gpu_ids: list[Annotated[int, Field(ge=0, le=4096)]] | None = Field(None, description="Explicit CUDA device ids; several train data-parallel, one process per GPU. None = choose by free memory.")
    num_gpus: int | None = Field(None, ge=1, le=4096, description="Train data-parallel on this many GPUs, chosen by free memory (instead of gpu_ids).")
    num_processes: int | None = Field(None, ge=1, le=1024, description="Training processes per node. With GPUs one per GPU (the default); on a CPU-only machine N gloo processes.")
    distributed: Distributed = Field("auto", description="auto | ddp | fsdp. auto: DDP for adapter runs, FSDP2 for full fine-tuning.")
    nodes: NodesConfig | None = Field(None, description="Multi-node training with torchrun (count, node_rank, master_addr, master_port or rdzv_endpoint).")
    ray_address: Name | None = Field(None, description="Train on a Ray cluster (e.g. auto, 10.0.0.1:6379) through Ray Train; needs tunelab[cluster].")
    backend: Backend = "auto"
    queue: bool = Field(True, description="When the devices this run needs are busy with other runs, wait in the server's queue and start as soon as they are free (true), or refuse the start with 409 (false).")
    memory_fit: MemoryFit = Field("refuse", description="Before a start, the estimated peak memory per device is checked against the GPUs' free memory: refuse (a run that will not fit is refused, naming the estimate, the free memory and the fix) | auto (turn gradient checkpointing on where it is left to auto, then lower batch_size and raise gradient_accumulation_steps, keeping the effective batch, until it fits; the change is logged) | off (no check). On a CPU the available RAM only warns.")

    # --- output
    output_dir: PathText | None = Field(None, description="Default: a new folder under the outputs root.")
    allow_output_outside_root: bool = Field(False, description="Required for an output_dir outside the outputs root.")
    resume_from: PathText | None = Field(None, description="A checkpoint folder or a run id to continue from.")
    export_after: Name | None = Field(None, description=EXPORT_AFTER_HELP)
    display_name: DisplayName | None = None

    @field_validator("max_grad_norm")
    @classmethod
    def _clip(cls, v: float) -> float:
        return max(0.0, v)

    @field_validator("max_grad_value", "max_grad_leaf_norm")
    @classmethod
    def _clip_bound(cls, v: float | None) -> float | None:
        # A bound, not a switch like max_grad_norm: a negative one is a mistake, not "off".
        if v is not None and v < 0:
            raise ValueError(f"must be 0 or more, got {v}; leave it empty or set 0 to turn this clipping off")
        return v

    @field_validator("learning_rate")
    @classmethod
    def _lr(cls, v: float) -> float:
        if not 0 < v < 1:
            raise ValueError(f"must be between 0 and 1 (exclusive), got {v}; typical LoRA values are 1e-4 to 3e-4")
        return v

    @field_validator("column_mapping")
    @classmethod
    def _mapping(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if k not in CANONICAL_COLUMNS]
        if bad:
            raise ValueError(f"unknown target {bad}; map onto one of {list(CANONICAL_COLUMNS)}")
        return v

    @field_validator("export_after")
    @classmethod
    def _export_after(cls, v: str | None) -> str | None:
        return export_after_format(v)

    @field_validator("matryoshka_dims")
    @classmethod
    def _matryoshka(cls, v: list[int] | None) -> list[int] | None:
        return normalise_matryoshka_dims(v)

    @model_validator(mode="after")
    def _cross_checks(self) -> "RunConfig":
        errs: list[tuple[str, str]] = []
        if self.max_steps == 0 and self.num_epochs == 0:
            errs.append(("max_steps", "max_steps and num_epochs are both 0; set max_steps > 0 or num_epochs > 0"))
        chosen = [n for n in ("use_dora", "use_rslora", "use_loftq") if getattr(self, n)]
        if len(chosen) > 1:
            errs.append((chosen[1], f"{' and '.join(chosen)} cannot be combined; keep at most one of use_dora, use_rslora, use_loftq"))
        if not self.uses_adapter:
            for name in chosen:
                errs.append((name, f"{name} is an adapter option and does nothing with training_type={self.training_type}; remove it or use training_type=lora"))
            if self.training_type == "full" and self.load_in_4bit:
                # SPEC: 4-bit is forced off for full fine-tuning (it cannot train 4-bit weights).
                object.__setattr__(self, "load_in_4bit", False)
            elif self.load_in_4bit:
                # It trains every weight, and packed 4-bit integers cannot take gradients.
                errs.append(("load_in_4bit", f"training_type={self.training_type} trains every weight and 4-bit weights cannot be trained; set load_in_4bit=false, or use training_type=qlora to train an adapter on a 4-bit base"))
        if self.training_type == "qlora" and not self.load_in_4bit:
            object.__setattr__(self, "load_in_4bit", True)
        errs.extend(finetune_switch_errors(self))
        errs.extend(objective_errors(self))
        errs.extend(grpo_errors(self))
        if self.format != "auto" and self.embedding_loss != "auto" and not loss_fits(self.embedding_loss, self.format):
            errs.append(("embedding_loss", loss_format_error(self.embedding_loss, self.format)))
        if self.warmup_steps is not None and self.warmup_ratio is not None:
            errs.append(("warmup_ratio", "set warmup_steps or warmup_ratio, not both"))
        if self.slice_start is not None and self.slice_end is not None and self.slice_end <= self.slice_start:
            errs.append(("slice_end", "slice_end must be greater than slice_start"))
        if not (self.dataset or self.local_datasets or self.s3):
            errs.append(("dataset", "no training data: set dataset (hub id), local_datasets (file paths) or s3"))
        if self.report_to == "wandb" and not self.wandb_project:
            object.__setattr__(self, "wandb_project", "tunelab")
        if self.resolved_backend == "mlx":
            errs.extend(mlx_limits(self))
        errs.extend(layout_errors(self))
        errs.extend(export_after_errors(self))
        errs.extend(fingerprint_errors(self))
        if errs:
            raise ErrorList(errs)
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _normalise_input(cls, data: Any, handler: Any) -> Any:
        """None means "use the default"; unknown keys and the cross-field checks are reported
        together with every other field's problem, so one attempt shows all that needs
        fixing. Defined after `_cross_checks` so that it wraps them too."""
        if not isinstance(data, dict):
            return handler(data)
        unknown = [k for k in data if k not in cls.model_fields]
        cleaned = {}
        for key, value in data.items():
            field = cls.model_fields.get(key)
            if field is None:
                continue
            if value is None and not field.is_required() and field.get_default(call_default_factory=True) is not None:
                continue
            cleaned[key] = value
        problems = [unknown_key_error(key, data[key], list(cls.model_fields)) for key in unknown]
        try:
            config = handler(cleaned)
        except ValidationError as exc:
            errors = exc.errors()
            problems = [rebuilt_error(err) for err in errors] + problems + cross_problems_beside(cls, cleaned, errors, handler)
        else:
            if not problems:
                return config
        raise ValidationError.from_exception_data(cls.__name__, problems)

    # --- derived facts -------------------------------------------------------------
    @property
    def uses_adapter(self) -> bool:
        return self.training_type in ("lora", "qlora")

    @property
    def resolved_backend(self) -> str:
        if self.backend != "auto":
            return self.backend
        return "mlx" if platform.system() == "Darwin" and platform.machine() == "arm64" else "torch"

    @property
    def dataset_label(self) -> str:
        if self.dataset:
            return self.dataset
        if self.local_datasets:
            return ", ".join(Path(p).name for p in self.local_datasets)
        return f"s3://{self.s3.bucket}/{self.s3.prefix}" if self.s3 else ""

    def public(self) -> dict[str, Any]:
        """The config as stored and shown: JSON-safe, with every secret removed."""
        data = self.model_dump(mode="json", exclude=set(SECRET_FIELDS))
        if data.get("s3"):
            for key in S3_SECRET_FIELDS:
                data["s3"].pop(key, None)
        return data

    def worker_payload(self) -> dict[str, Any]:
        """The config handed to a worker process: secrets included, in plain form."""
        data = self.model_dump(mode="json")
        for key in SECRET_FIELDS:
            secret = getattr(self, key)
            data[key] = secret.get_secret_value() if secret else None
        if self.s3:
            for key in S3_SECRET_FIELDS:
                secret = getattr(self.s3, key)
                data["s3"][key] = secret.get_secret_value() if secret else None
        return data

    def secret_names(self) -> list[str]:
        """Which secrets this config carries, by name ("hf_token", "s3.access_key_id", ...)."""
        names = [k for k in SECRET_FIELDS if getattr(self, k)]
        if self.s3:
            names += [f"s3.{k}" for k in S3_SECRET_FIELDS if getattr(self.s3, k)]
        return names

    def secret_values(self) -> list[str]:
        """Every secret string this config carries (for leak checks and log scrubbing)."""
        found = [getattr(self, k).get_secret_value() for k in SECRET_FIELDS if getattr(self, k)]
        if self.s3:
            found += [getattr(self.s3, k).get_secret_value() for k in S3_SECRET_FIELDS if getattr(self.s3, k)]
        return [s for s in found if s]


def parse_config(data: dict[str, Any]) -> RunConfig:
    """Validate a mapping into a RunConfig, raising ConfigError on any problem."""
    if not isinstance(data, dict):
        raise ConfigError.single("config", "must be a mapping of setting: value")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(errors_from_validation(exc)) from None
