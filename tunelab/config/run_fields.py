"""Every setting of one run: its type, default and bounds, its description (the API and
`tunelab fields` reference) and how the page's Configure form shows it (config/form.py).

`RunFields` declares the settings only; `RunConfig` (config/run_config.py) adds the checks
that decide what a valid run is, and the secrets' handling. The nested groups (an S3 data
source, torchrun's multi-node settings) and the list of GRPO rewards are models of their
own. Torch-free, like config/run_config.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tunelab.config.embedding import EMBEDDING_LOSS_HELP, MATRYOSHKA_HELP, EmbeddingLoss
from tunelab.config.export_after import EXPORT_AFTER_HELP
from tunelab.config.form import form
from tunelab.config.grpo import MAX_COMPLETION_LENGTH_HELP, NUM_GENERATIONS_HELP, REWARDS_HELP, TEMPERATURE_HELP, RewardSpec
from tunelab.config.preference import BETA_HELP, OBJECTIVE_HELP, Objective
from tunelab.config.text import DisplayName, Name, PathText, Secret
from tunelab.remote_code.check import HELP as REMOTE_CODE_HELP

TrainingType = Literal["lora", "qlora", "full", "continued_pretraining"]
DataFormat = Literal["auto", "alpaca", "sharegpt", "chatml", "text", "caption", "pairs", "triplets", "scored_pairs", "labelled_pairs",
                     "transcription", "preference", "unpaired_preference", "prompt_only"]
Backend = Literal["auto", "torch", "mlx"]
ReportTo = Literal["none", "tensorboard", "wandb", "mlflow"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
Distributed = Literal["auto", "ddp", "fsdp"]
MemoryFit = Literal["refuse", "auto", "off"]

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
    bucket: Name = Field(description="The bucket holding the data files.", json_schema_extra=form("Bucket", "data", 70, source="s3"))
    prefix: PathText = Field("", description="Folder (key prefix) inside the bucket that holds the data files.",
                             json_schema_extra=form("Prefix", "data", 80, help="Folder inside the bucket holding the data files.", source="s3"))
    region: Name | None = Field(None, description="The bucket's region; empty: the machine's AWS configuration.",
                                json_schema_extra=form("Region", "data", 90, source="s3"))
    endpoint_url: PathText | None = Field(None, description="The endpoint of an S3-compatible store; empty for AWS S3.",
                                          json_schema_extra=form("Endpoint URL", "data", 100, help="Only for S3-compatible stores.", source="s3"))
    access_key_id: Secret | None = Field(None, description="Access key id (secret; never stored). Give it with secret_access_key, or neither to use the machine's own AWS credentials.",
                                         json_schema_extra=form("Access key id", "data", 110, source="s3"))
    secret_access_key: Secret | None = Field(None, description="Secret access key (secret; never stored). Give it with access_key_id, or neither to use the machine's own AWS credentials.",
                                             json_schema_extra=form("Secret access key", "data", 120, source="s3"))
    session_token: Secret | None = Field(None, description="Session token of temporary credentials (secret; never stored).",
                                         json_schema_extra=form("Session token", "data", 130, source="s3"))

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
    count: int = Field(ge=2, le=4096, description="How many machines take part (torchrun --nnodes).",
                       json_schema_extra=form("Nodes", "Scale out", 850, help="Several machines: run `tunelab train CONFIG --node-rank N` on each other machine; this server is the head."))
    node_rank: int = Field(0, ge=0, le=4095, description="This machine's rank; 0 is the head (torchrun --node-rank).",
                           json_schema_extra=form("Node rank", "Scale out", 890, help="0: this machine is the head that records the run."))
    master_addr: Name | None = Field(None, description="The head's address every node can reach (torchrun --master-addr).",
                                     json_schema_extra=form("Head address", "Scale out", 860, help="This machine's address as the other nodes reach it."))
    master_port: int = Field(29500, ge=1, le=65535, description="The head's rendezvous port (torchrun --master-port).",
                             json_schema_extra=form("Rendezvous port", "Scale out", 870))
    rdzv_endpoint: Name | None = Field(None, description="host:port of the head's rendezvous, instead of master_addr/master_port (a static rendezvous: global ranks follow node_rank).",
                                       json_schema_extra=form("c10d rendezvous", "Scale out", 880, help="Instead of head address and port.", placeholder="host:port"))
    join_timeout_s: float = Field(300, ge=1, le=86400, description="How long the nodes wait for each other before the run fails.",
                                  json_schema_extra=form("Join timeout (s)", "Scale out", 900))


class RunFields(BaseModel):
    """The settings of one run, declared; RunConfig checks them."""

    # defer_build: as RunConfig's, built by the first config parsed rather than at import.
    model_config = ConfigDict(defer_build=True)

    # --- model
    model_name: PathText = Field(min_length=1, description="Hub id (org/name) or a local model folder.",
                                 json_schema_extra=form("Model", "model", 10, help="A Hugging Face hub id or a local model folder.", placeholder="org/model or /path/to/model"))
    training_type: TrainingType = Field("lora", description="lora | qlora | full | continued_pretraining.",
                                        json_schema_extra=form("Training type", "model"))
    objective: Objective = Field("sft", description=OBJECTIVE_HELP,
                                 json_schema_extra=form("Objective", "train", 150, help="sft: learn the answers in the data. dpo, orpo, simpo: learn to prefer the chosen answer over the rejected one (prompt, chosen, rejected data). kto: also from completions labelled good or bad (prompt, completion, label). grpo: sample completions for each prompt and learn from their rewards (prompt data, optional reference answer; set Rewards)."))
    beta: float | None = Field(None, gt=0, le=1000, description=BETA_HELP,
                               json_schema_extra=form("Preference beta", "Preference", 440, help="dpo, orpo, simpo, kto, grpo only: how strongly the preference counts (grpo: the KL penalty against the base; kl is then charted). Empty: 0.1 (dpo, orpo, kto), 2.0 (simpo) or 0 (grpo)."))
    rewards: list[RewardSpec] = Field(default_factory=list, max_length=64, description=REWARDS_HELP,
                                      json_schema_extra=form("Rewards", "GRPO", 450, help="grpo only: one reward per line, summed with its weight. name: exact_match or contains (against the reference answer), regex (pattern), length (max_chars), json, python (path, function; needs `tunelab serve --allow-reward-code` and a file in the data roots).", placeholder="{\"name\": \"exact_match\", \"weight\": 1}\n{\"name\": \"regex\", \"pattern\": \"^The answer\", \"weight\": 0.5}"))
    num_generations: int | None = Field(None, ge=2, le=1024, description=NUM_GENERATIONS_HELP,
                                        json_schema_extra=form("Generations per prompt", "GRPO", 460, help="grpo only: completions sampled per prompt (2 or more); batch size × accumulation must be a multiple of it. Empty: 4."))
    max_completion_length: int | None = Field(None, ge=1, le=1_048_576, description=MAX_COMPLETION_LENGTH_HELP,
                                              json_schema_extra=form("Max completion tokens", "GRPO", 470, help="grpo only: the most tokens generated per completion. Empty: 64."))
    temperature: float | None = Field(None, gt=0, le=100, description=TEMPERATURE_HELP,
                                      json_schema_extra=form("Sampling temperature", "GRPO", 480, help="grpo only: higher gives more varied completions. Empty: 1.0."))
    max_seq_length: int = Field(2048, ge=16, le=1_048_576, description="Longest tokenized example; longer rows are truncated.",
                                json_schema_extra=form("Max sequence length", "more", 20, help="Longer examples are truncated."))
    load_in_4bit: bool = Field(False, description="Load the base model in 4-bit (QLoRA). Needs CUDA.",
                               json_schema_extra=form("Load in 4-bit", "Adapter", 370, help="Needs a CUDA GPU; QLoRA turns it on."))
    trust_remote_code: bool = Field(False, description="Allow the model's own code (its auto_map files) to run. Over HTTP it needs "
                                    "`tunelab serve --allow-remote-code`, and without approved_remote_code_fingerprint "
                                    "also --allow-unpinned-remote-code.",
                                    json_schema_extra=form("Trust remote code", "Model access", 710, help="Lets the model's own code (its auto_map files) run on this machine."))
    approved_remote_code_fingerprint: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(None, description=REMOTE_CODE_HELP,
                                                                                                         json_schema_extra=form("Approved code fingerprint", "Model access", 720, help="With trust remote code: the run loads only code with this fingerprint. The memory estimate shows the model's code files and their fingerprint; review them first.", placeholder="64 hex characters"))
    hf_token: Secret | None = Field(None, description="Hub token (secret; never stored).",
                                    json_schema_extra=form("Hub token", "Model access", 730, help="Never stored or saved to YAML."))

    # --- data
    dataset: PathText | None = Field(None, description="Hub dataset id.",
                                     json_schema_extra=form("Hub dataset", "data", 40, placeholder="org/dataset", source="hub"))
    local_datasets: list[PathText] = Field(default_factory=list, description="Local .json/.jsonl/.csv/.parquet files.",
                                           json_schema_extra=form("Data files", "data", 30, help="One path per line: .json, .jsonl, .csv or .parquet.", placeholder="/path/to/train.jsonl", source="local"))
    s3: S3Source | None = Field(None, description="S3 bucket/prefix holding data files.", json_schema_extra=form("S3", "data", source="s3"))
    subset: Name | None = Field(None, description="Hub dataset configuration name.",
                                json_schema_extra=form("Subset", "data", 50, help="The dataset configuration name, if it has several.", source="hub"))
    train_split: Name = Field("train", min_length=1, description="Split of the hub dataset to train on.",
                              json_schema_extra=form("Train split", "data", 60, source="hub"))
    eval_split: Name | None = Field(None, description="Split used for evaluation; auto-detected when absent.",
                                    json_schema_extra=form("Eval split", "Evaluation", 240, help="Found automatically (validation, val, test) when empty."))
    local_eval_datasets: list[PathText] = Field(default_factory=list, description="Local .json/.jsonl/.csv/.parquet files to evaluate on, instead of an eval split.",
                                                json_schema_extra=form("Eval files", "Evaluation", 250, help="One path per line."))
    eval_holdout: float = Field(0.0, ge=0.0, le=0.5, description="Share of training rows held out for eval when no eval split exists.",
                                json_schema_extra=form("Eval holdout share", "Evaluation", 260, help="Share of training rows held out when there is no eval split (0–0.5)."))
    eval_steps: float = Field(0, ge=0, le=MAX_STEPS, description="0 = no eval; >= 1 every N steps; < 1 a fraction of total steps.",
                              json_schema_extra=form("Eval every", "Evaluation", 270, help="0 = no eval; N = every N steps; below 1 = that share of all steps."))
    streaming: bool = Field(False, description="Read the hub dataset as a stream instead of downloading it whole; hub datasets only, and it needs slice_end (the rows to train on).",
                            json_schema_extra=form("Stream the dataset", "Data", 310))
    slice_start: int | None = Field(None, ge=0, le=MAX_ROWS, description="First row of the training data to use (counted from 0).",
                                    json_schema_extra=form("Slice start", "Data", 320, help="First row to use."))
    slice_end: int | None = Field(None, ge=1, le=MAX_ROWS, description="Row of the training data to stop before; greater than slice_start.",
                                  json_schema_extra=form("Slice end", "Data", 330, help="Row to stop before."))
    format: DataFormat = Field("auto", description="auto | alpaca | sharegpt | chatml | text | caption (an image column and a text column); "
                               "for embedding models pairs (anchor, positive) | triplets (anchor, positive, negative) | "
                               "scored_pairs (sentence1, sentence2, score) | labelled_pairs (query, document, label); "
                               "for speech-to-text models transcription (an audio column and a transcript column); "
                               "for objective dpo/orpo/simpo/kto preference (prompt, chosen, rejected: strings or chat messages lists; "
                               "the prompt may be the turns chosen and rejected open with, or LLaMA-Factory's conversations column); "
                               "for kto also unpaired_preference (prompt, completion, label, or LLaMA-Factory's messages and a true/false label); "
                               "for objective grpo prompt_only (a prompt column: strings or chat messages, and an optional reference or answer column).",
                               json_schema_extra=form("Format", "more", 140, help="auto detects it from the columns (caption: an image column and a text column; pairs, triplets, scored_pairs, labelled_pairs: embedding models; preference: prompt, chosen, rejected for dpo/orpo/simpo/kto (TRL's shapes, UltraFeedback's and LLaMA-Factory's too); unpaired_preference: prompt, completion, label, or LLaMA-Factory's messages and a true/false label, for kto; prompt_only: a prompt column and an optional reference or answer column for grpo); “check dataset” shows what it found.", wide=True))
    column_mapping: dict[Name, Name] = Field(default_factory=dict, description="Canonical column -> dataset column, e.g. {instruction: question}.",
                                             json_schema_extra=form("Column mapping", "Data", 280, help="One `target: your column` per line; targets: instruction, input, output, text, conversations, messages, system, images, image; for embedding models anchor, positive, negative, sentence1, sentence2, score, query, document, label; for preference objectives prompt, chosen, rejected, completion, label; for grpo prompt, reference.", placeholder="instruction: question\noutput: answer"))
    role_mapping: dict[Name, Name] = Field(default_factory=dict, description="Dataset role -> chat role, e.g. {function_call: tool}.",
                                           json_schema_extra=form("Role mapping", "Data", 290, help="One `your role: chat role` per line.", placeholder="function_call: tool"))
    train_on_completions: bool = Field(False, description="Compute loss on assistant tokens only.",
                                       json_schema_extra=form("Train on completions only", "Data", 300, help="Loss on the assistant's tokens only."))

    # --- adapter
    lora_r: int = Field(16, ge=1, le=4096, description="LoRA rank: the inner size of each adapter matrix.",
                        json_schema_extra=form("LoRA rank", "more", 210, adapter_only=True))
    lora_alpha: float = Field(16, gt=0, le=1_000_000, description="LoRA scale: the adapter's update is multiplied by lora_alpha / lora_r (lora_alpha / sqrt(lora_r) with use_rslora).",
                              json_schema_extra=form("LoRA alpha", "more", 220, adapter_only=True))
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapter's input while training (0 to below 1).",
                                json_schema_extra=form("LoRA dropout", "Adapter", 340, adapter_only=True))
    target_modules: list[Name] | None = Field(None, description="Default: all attention and MLP projections.",
                                              json_schema_extra=form("Target modules", "Adapter", 350, help="One per line; empty = all attention and MLP projections.", placeholder="q_proj\nv_proj", adapter_only=True))
    use_rslora: bool = Field(False, description="rsLoRA: scale the adapter by lora_alpha / sqrt(lora_r), which keeps high ranks stable. Adapter runs only; not with use_dora or use_loftq.",
                             json_schema_extra=form("rsLoRA", "model"))
    use_dora: bool = Field(False, description="DoRA: LoRA with a learned magnitude per output. Each step costs more than LoRA (1.3x on a small CPU model); on a 4-bit base (QLoRA) every forward pass dequantises each adapted weight to take its norm, which costs extra time and a full-precision copy of one weight at a time.",
                           json_schema_extra=form("DoRA", "model"))
    use_loftq: bool = Field(False, description="LoftQ: start the adapter where it offsets the base weights' quantisation error. Adapter runs only; not with use_dora or use_rslora.",
                            json_schema_extra=form("LoftQ", "model"))
    gradient_checkpointing: bool | None = Field(None, description="None = device-aware default: off on a CPU; on a GPU off where the memory estimate fits without it (it recomputes every layer in backward), else on.",
                                                json_schema_extra=form("Gradient checkpointing", "Adapter", 360, help="Saves memory at some speed; auto = on with CUDA, off on CPU."))

    # --- vision-language models (detected from the model's config; text models ignore the vision switch).
    # The finetune_* switches choose the adapter's targets, or for full fine-tuning the weights that train.
    vision_image_size: int = Field(512, ge=16, le=16384, description="Longest side, in pixels, every image is shrunk to (aspect kept) before the processor sees it.",
                                   json_schema_extra=form("Longest image side", "Vision", 380, help="Pixels; every image is shrunk to this before the processor sees it. Vision-language models only."))
    finetune_vision_layers: bool = Field(True, description="Train the vision tower and its projector into the language model (adapter targets, or weights in full fine-tuning).",
                                         json_schema_extra=form("Train vision layers", "Vision", 390, help="Train the vision tower and its projector (adapter targets, or weights in full fine-tuning)."))
    finetune_language_layers: bool = Field(True, description="Train the language model's layers (with its embeddings and output head in full fine-tuning).",
                                           json_schema_extra=form("Train language layers", "Vision", 400, help="Train the language model's layers."))
    finetune_attention_modules: bool = Field(True, description="Train attention projections (q/k/v/o and the like).",
                                             json_schema_extra=form("Train attention", "Vision", 410, help="Train attention projections (text models too)."))
    finetune_mlp_modules: bool = Field(True, description="Train MLP / feed-forward projections (and other linear layers outside attention, e.g. a vision projector).",
                                       json_schema_extra=form("Train MLP", "Vision", 420, help="Train MLP and other non-attention linear layers (text models too)."))
    skip_bad_images: bool = Field(False, description="Skip rows whose image is missing, unreadable or not an image (counted and reported before training) instead of ending the run; a path outside the data roots is still refused.",
                                  json_schema_extra=form("Skip bad images", "Vision", 430, help="Skip (and report) rows whose image is missing or unreadable instead of ending the run."))

    # --- embedding models (detected from the model's files; generative models ignore these)
    embedding_loss: EmbeddingLoss = Field("auto", description=EMBEDDING_LOSS_HELP,
                                          json_schema_extra=form("Embedding loss", "Embedding", 540, help="Embedding models only. auto: in-batch negatives ranking for pairs and triplets, CoSENT for scored pairs, online contrastive for labelled pairs."))
    matryoshka_dims: list[int] | None = Field(None, description=MATRYOSHKA_HELP,
                                              json_schema_extra=form("Matryoshka dimensions", "Embedding", 550, help="Embedding models only: also train these leading dimensions to work alone.", placeholder="256, 128, 64"))

    # --- speech-to-text models (detected from the model's config)
    speech_language: Name | None = Field(None, max_length=40, description="Language of the transcripts for a multilingual speech model (e.g. en or english): Whisper's labels, its eval transcripts and its saved generation_config start with this language's token. None: the language its tokenizer was saved with, else the one the model detects in the first training clips.",
                                         json_schema_extra=form("Transcript language", "Speech", 490, help="Speech-to-text models only: the transcripts' language for a multilingual model (e.g. en), used for the labels, eval and the saved generation_config. Empty: the tokenizer's own language, else the one the model detects in the first training clips.", placeholder="en"))
    skip_bad_audio: bool = Field(False, description="Skip rows whose audio is missing, unreadable, empty or longer than the model takes (counted and reported before training) instead of ending the run; a path outside the data roots is still refused.",
                                 json_schema_extra=form("Skip bad audio", "Speech", 500, help="Skip (and report) rows whose clip is missing, unreadable, empty or too long for the model instead of ending the run."))
    finetune_audio_layers: bool = Field(False, description="Audio chat models (Qwen2-Audio) only: train the audio tower and its projector too (adapter targets, or weights in full fine-tuning). Off: only the language model trains, on the pretrained encoder's features.",
                                        json_schema_extra=form("Train audio layers", "Speech", 510, help="Audio chat models (Qwen2-Audio) only: train the audio tower and its projector too. Off: only the language model trains."))

    # --- text-to-speech models (Orpheus-style: detected from the model's config or tokenizer)
    tts_codec: PathText | None = Field(None, description="The SNAC codec a text-to-speech model speaks through: a folder with SNAC's config.json and pytorch_model.bin, or a hub repo. None: the model folder's codec/ subfolder (tunelab saves one with every TTS model), else hubertsiuzdak/snac_24khz. Orpheus-style models only: a Sesame CSM model speaks through the Mimi codec inside it.",
                                       json_schema_extra=form("TTS codec", "Speech", 520, help="Text-to-speech models only: the SNAC codec folder or hub repo. Empty: the model folder's codec/, else hubertsiuzdak/snac_24khz.", placeholder="hubertsiuzdak/snac_24khz"))
    tts_sample_text: Name | None = Field(None, max_length=500, description="The sentence a text-to-speech run speaks at each eval into samples/step-N.wav (the page plays it). None: the first eval row's text.",
                                         json_schema_extra=form("TTS sample sentence", "Speech", 530, help="Text-to-speech models only: spoken into samples/step-N.wav at each eval and played beside the loss chart.", placeholder="the first eval row's text"))

    # --- optimisation
    num_epochs: float = Field(3, ge=0, le=MAX_EPOCHS, description="Passes over the training data (a fraction is allowed); used when max_steps is 0.",
                              json_schema_extra=form("Epochs", "train", 170, help="Passes over the data (used when max steps is 0)."))
    max_steps: int = Field(0, ge=0, le=MAX_STEPS, description="0 = train for num_epochs.",
                           json_schema_extra=form("Max steps", "train", 180, help="0 = train for the epochs above."))
    learning_rate: float = Field(2e-4, description="Peak learning rate, between 0 and 1 (exclusive); LoRA usually 1e-4 to 3e-4.",
                                 json_schema_extra=form("Learning rate", "train", 160, help="Between 0 and 1; LoRA usually 1e-4 to 3e-4."))
    embedding_learning_rate: float | None = Field(
        None, gt=0, le=1.0,
        description="Own learning rate for the input embeddings and output head (embed_tokens / lm_head), usually 2-10x below "
                    "learning_rate, for continued pretraining on a new domain or language. With lora/qlora those two modules "
                    "are then trained whole and saved with the adapter. Empty: they train at learning_rate (or not at all with lora).",
        json_schema_extra=form("Embedding learning rate", "Optimiser", 590, help="Own rate for embed_tokens / lm_head (2-10x below the learning rate) when teaching a new domain or language; with LoRA they then train whole."))
    batch_size: int = Field(2, ge=1, le=MAX_BATCH_SIZE, description="Rows per device per step; at most the number of training rows.",
                            json_schema_extra=form("Batch size", "more", 190))
    gradient_accumulation_steps: int = Field(4, ge=1, le=MAX_ACCUMULATION_STEPS, description="Steps whose gradients add up to one optimizer update: the effective batch is batch_size x this x the number of devices.",
                                             json_schema_extra=form("Gradient accumulation", "more", 200, help="Steps whose gradients add up to one update."))
    warmup_steps: int | None = Field(None, ge=0, le=MAX_STEPS, description="Steps over which the learning rate rises to learning_rate; set this or warmup_ratio, not both.",
                                     json_schema_extra=form("Warmup steps", "Optimiser", 560, help="Set this or the warmup ratio, not both."))
    warmup_ratio: float | None = Field(None, ge=0.0, lt=1.0, description="Warmup as a share of all steps (0 to below 1); set this or warmup_steps, not both.",
                                       json_schema_extra=form("Warmup ratio", "Optimiser", 570))
    weight_decay: float = Field(0.001, ge=0.0, description="The optimizer's weight decay.", json_schema_extra=form("Weight decay", "Optimiser", 580))
    max_grad_norm: float = Field(1.0, description="Gradient clip; 0 or negative disables clipping.",
                                 json_schema_extra=form("Gradient clip", "Optimiser", 600, help="0 disables clipping."))
    max_grad_value: float | None = Field(None, description="Clip every gradient element to ±this value, after max_grad_norm and before the optimizer step (mixed precision: on the unscaled gradients). Empty or 0: off. The logged grad_norm stays the norm before any clipping.",
                                         json_schema_extra=form("Clip each element", "Optimiser", 620, help="Clip every gradient element to ± this value (last, before the optimizer step). Empty or 0: off. Torch backend only."))
    max_grad_leaf_norm: float | None = Field(None, description="Clip each parameter's gradient to this norm on its own, after max_grad_norm and before max_grad_value. Empty or 0: off.",
                                             json_schema_extra=form("Clip each parameter", "Optimiser", 610, help="Clip each parameter's gradient to this norm (after the gradient clip). Empty or 0: off. Torch backend only."))
    lr_scheduler_type: Name = Field("linear", description="The learning-rate schedule after warmup: an HF Trainer scheduler name (linear, cosine, constant, ...); the mlx backend takes linear, cosine, constant and constant_with_warmup.",
                                    json_schema_extra=form("LR schedule", "Optimiser", 630, help="linear, cosine, constant, …"))
    optim: Name = Field("adamw_torch_fused", description="Any HF Trainer optimizer name; the default is fused AdamW, as in transformers.",
                        json_schema_extra=form("Optimiser", "Optimiser", 640))
    seed: int = Field(3407, ge=0, le=MAX_SEED, description="0 to 2**32-1.", json_schema_extra=form("Seed", "Optimiser", 650))
    packing: bool = Field(False, description="Pack several short rows into each max_seq_length sequence: faster on short data. Not with the preference objectives or grpo.",
                          json_schema_extra=form("Packing", "Optimiser", 660, help="Pack short rows together: faster on short data."))
    save_steps: int = Field(0, ge=0, le=MAX_STEPS, description="0 = save only at the end.",
                            json_schema_extra=form("Save every", "Optimiser", 680, help="Checkpoint every N steps; 0 = only at the end."))
    save_total_limit: int | None = Field(None, ge=1, le=100_000, description="How many checkpoints are kept (the oldest are deleted first); empty: all.",
                                         json_schema_extra=form("Checkpoints kept", "Optimiser", 690, help="Empty = keep all."))
    logging_steps: int = Field(1, ge=1, le=MAX_STEPS, description="Log the loss and learning rate every N steps.",
                               json_schema_extra=form("Log every", "Optimiser", 700))
    precision: Precision = Field("auto", description="auto picks bf16 on capable GPUs; on a CPU fp32, or bf16 autocast where the CPU has native bf16 and the model is at least 256 wide.",
                                 json_schema_extra=form("Precision", "Optimiser", 670))

    # --- tracking
    report_to: ReportTo = Field("none", description="none | tensorboard | wandb | mlflow: where metrics go besides the page and the run database.",
                                json_schema_extra=form("Report to", "Tracking", 740))
    wandb_project: Name | None = Field(None, description="Weights & Biases project; with report_to=wandb and none given: tunelab.",
                                       json_schema_extra=form("W&B project", "Tracking", 750))
    wandb_token: Secret | None = Field(None, description="Weights & Biases API key (secret; never stored).",
                                       json_schema_extra=form("W&B token", "Tracking", 760))
    tensorboard_dir: PathText | None = Field(None, description="Folder for TensorBoard's event files with report_to=tensorboard. Default: tensorboard/ in the run's output folder.",
                                             json_schema_extra=form("TensorBoard folder", "Tracking", 770))
    mlflow_tracking_uri: PathText | None = Field(None, description="MLflow tracking server (http, https), sqlite:/// database or folder, with report_to=mlflow.",
                                                 json_schema_extra=form("MLflow tracking URI", "Tracking", 780))
    mlflow_experiment: Name | None = Field(None, description="MLflow experiment the run is logged under, with report_to=mlflow.",
                                           json_schema_extra=form("MLflow experiment", "Tracking", 790))

    # --- hardware
    gpu_ids: list[Annotated[int, Field(ge=0, le=4096)]] | None = Field(None, description="Explicit CUDA device ids; several train data-parallel, one process per GPU. None = choose by free memory.",
                                                                       json_schema_extra=form("GPU ids", "Hardware and output", 810, help="Several ids train data-parallel, one process per GPU. Empty = choose by free memory.", placeholder="0, 1"))
    num_gpus: int | None = Field(None, ge=1, le=4096, description="Train data-parallel on this many GPUs, chosen by free memory (instead of gpu_ids).",
                                 json_schema_extra=form("Number of GPUs", "Scale out", 820, help="Train data-parallel on this many GPUs, chosen by free memory (instead of GPU ids)."))
    num_processes: int | None = Field(None, ge=1, le=1024, description="Training processes per node. With GPUs one per GPU (the default); on a CPU-only machine N gloo processes.",
                                      json_schema_extra=form("Processes per node", "Scale out", 830, help="One per GPU by default; on a CPU-only machine, N gloo processes."))
    distributed: Distributed = Field("auto", description="auto | ddp | fsdp. auto: DDP for adapter runs, FSDP2 for full fine-tuning.",
                                     json_schema_extra=form("Distributed strategy", "Scale out", 840, help="auto: DDP for adapters, FSDP2 for full fine-tuning."))
    nodes: NodesConfig | None = Field(None, description="Multi-node training with torchrun (count, node_rank, master_addr, master_port or rdzv_endpoint).",
                                      json_schema_extra=form("Nodes", "Scale out"))
    ray_address: Name | None = Field(None, description="Train on a Ray cluster (e.g. auto, 10.0.0.1:6379) through Ray Train; needs tunelab[cluster].",
                                     json_schema_extra=form("Ray cluster", "Scale out", 910, help="Place the run's workers on a Ray cluster (the server must allow it).", placeholder="auto or host:6379"))
    backend: Backend = Field("auto", description="auto | torch | mlx. auto: mlx on Apple silicon, torch elsewhere.",
                             json_schema_extra=form("Backend", "Hardware and output", 800))
    queue: bool = Field(True, description="When the devices this run needs are busy with other runs, wait in the server's queue and start as soon as they are free (true), or refuse the start with 409 (false).",
                        json_schema_extra=form("Wait in the queue", "Hardware and output", 920, help="When the devices this run needs are busy, wait in the server's queue and start when they are free; off: refuse the start instead."))
    memory_fit: MemoryFit = Field("refuse", description="Before a start, the estimated peak memory per device is checked against the GPUs' free memory: refuse (a run that will not fit is refused, naming the estimate, the free memory and the fix) | auto (turn gradient checkpointing on where it is left to auto, then lower batch_size and raise gradient_accumulation_steps, keeping the effective batch, until it fits; the change is logged) | off (no check). On a CPU the available RAM only warns.",
                                  json_schema_extra=form("Memory check", "Hardware and output", 930, help="Before a start: refuse a run whose memory estimate exceeds the GPU's free memory, or auto: checkpointing on and a smaller micro-batch with more accumulation until it fits."))

    # --- output
    output_dir: PathText | None = Field(None, description="Default: a new folder under the outputs root.",
                                        json_schema_extra=form("Output folder", "Hardware and output", 940, help="Empty = a new folder under the outputs root."))
    allow_output_outside_root: bool = Field(False, description="Required for an output_dir outside the outputs root.",
                                            json_schema_extra=form("Allow output outside the root", "Hardware and output", 950))
    resume_from: PathText | None = Field(None, description="A checkpoint folder or a run id to continue from.",
                                         json_schema_extra=form("Resume from", "Hardware and output", 960, help="A checkpoint folder or a run id."))
    export_after: Name | None = Field(None, description=EXPORT_AFTER_HELP,
                                      json_schema_extra=form("Export when done", "Hardware and output", 970, help="Export the run as it completes, in the training process: merged (base + adapter in one model) into export-merged, or the adapter into export-adapter. A failed export leaves the run completed.", options=[["", "no"], "merged", "adapter"]))
    display_name: DisplayName | None = Field(None, description="How the run is listed in the history; optional.",
                                             json_schema_extra=form("Run name", "train", 230, help="How the run is listed in the history.", placeholder="optional"))
