/**
 * The run settings the form shows: one entry per RunConfig field (tunelab/config/run_config.py),
 * with its label, kind, default and a line of help. The form is drawn from this table,
 * so a label, an input and the slot for its server error always come together.
 *
 * Kinds: text, secret (never saved to YAML), int, float, bool, select, tristate
 * (auto/on/off -> null/true/false), list (one item per line), intlist ("0, 1"),
 * map (one `key: value` per line), jsonlist (one JSON object per line).
 * `adapterOnly` fields are hidden when the method trains no adapter.
 */

export const METHODS = [
  { value: "lora", label: "LoRA", help: "Small trainable adapter on a frozen model. The usual choice." },
  { value: "qlora", label: "QLoRA", help: "LoRA on a 4-bit model: least memory. Needs a CUDA GPU." },
  { value: "dora", label: "DoRA", help: "LoRA that also learns weight magnitudes; a little slower, often a little better." },
  { value: "rslora", label: "rsLoRA", help: "LoRA with rank-stabilised scaling; helps at high ranks." },
  { value: "loftq", label: "LoftQ", help: "LoRA initialised to offset quantisation error." },
  { value: "full", label: "Full fine-tuning", help: "Trains every weight: most memory, no adapter." },
  { value: "continued_pretraining", label: "Continued pretraining", help: "Full training on raw text to teach the model a domain." },
];

/** Method -> the RunConfig fields that express it. */
export const METHOD_SETTINGS = {
  lora: { training_type: "lora" },
  qlora: { training_type: "qlora" },
  dora: { training_type: "lora", use_dora: true },
  rslora: { training_type: "lora", use_rslora: true },
  loftq: { training_type: "lora", use_loftq: true },
  full: { training_type: "full" },
  continued_pretraining: { training_type: "continued_pretraining" },
};

export const ADAPTER_METHODS = new Set(["lora", "qlora", "dora", "rslora", "loftq"]);

/** Where a dataset comes from; each source shows only its own fields. */
export const DATA_SOURCES = [
  { value: "local", label: "Local files" },
  { value: "hub", label: "Hugging Face hub" },
  { value: "s3", label: "S3" },
];

const f = (name, label, kind, def, extra = {}) => ({ name, label, kind, def, ...extra });

/**
 * The form's first part, in this order, grouped by `section`: model, data and train are
 * the essentials, always shown; "more" is a section folded away until opened.
 */
export const BASIC_FIELDS = [
  f("model_name", "Model", "text", "", { section: "model", required: true, placeholder: "org/model or /path/to/model", help: "A Hugging Face hub id or a local model folder." }),
  f("max_seq_length", "Max sequence length", "int", 2048, { section: "more", help: "Longer examples are truncated." }),

  f("local_datasets", "Data files", "list", [], { section: "data", source: "local", placeholder: "/path/to/train.jsonl", help: "One path per line: .json, .jsonl, .csv or .parquet." }),
  f("dataset", "Hub dataset", "text", "", { section: "data", source: "hub", placeholder: "org/dataset" }),
  f("subset", "Subset", "text", "", { section: "data", source: "hub", help: "The dataset configuration name, if it has several." }),
  f("train_split", "Train split", "text", "train", { section: "data", source: "hub" }),
  f("s3.bucket", "Bucket", "text", "", { section: "data", source: "s3" }),
  f("s3.prefix", "Prefix", "text", "", { section: "data", source: "s3", help: "Folder inside the bucket holding the data files." }),
  f("s3.region", "Region", "text", "", { section: "data", source: "s3" }),
  f("s3.endpoint_url", "Endpoint URL", "text", "", { section: "data", source: "s3", help: "Only for S3-compatible stores." }),
  f("s3.access_key_id", "Access key id", "secret", "", { section: "data", source: "s3" }),
  f("s3.secret_access_key", "Secret access key", "secret", "", { section: "data", source: "s3" }),
  f("s3.session_token", "Session token", "secret", "", { section: "data", source: "s3" }),
  f("format", "Format", "select", "auto", { section: "more", wide: true, options: ["auto", "alpaca", "sharegpt", "chatml", "text", "caption", "pairs", "triplets", "scored_pairs", "labelled_pairs", "transcription", "preference", "unpaired_preference", "prompt_only"], help: "auto detects it from the columns (caption: an image column and a text column; pairs, triplets, scored_pairs, labelled_pairs: embedding models; preference: prompt, chosen, rejected for dpo/orpo/simpo/kto (TRL's shapes, UltraFeedback's and LLaMA-Factory's too); unpaired_preference: prompt, completion, label, or LLaMA-Factory's messages and a true/false label, for kto; prompt_only: a prompt column and an optional reference or answer column for grpo); “check dataset” shows what it found." }),

  f("objective", "Objective", "select", "sft", { section: "train", options: ["sft", "dpo", "orpo", "simpo", "kto", "grpo"], help: "sft: learn the answers in the data. dpo, orpo, simpo: learn to prefer the chosen answer over the rejected one (prompt, chosen, rejected data). kto: also from completions labelled good or bad (prompt, completion, label). grpo: sample completions for each prompt and learn from their rewards (prompt data, optional reference answer; set Rewards)." }),
  f("learning_rate", "Learning rate", "float", 2e-4, { section: "train", help: "Between 0 and 1; LoRA usually 1e-4 to 3e-4." }),
  f("num_epochs", "Epochs", "float", 3, { section: "train", help: "Passes over the data (used when max steps is 0)." }),
  f("max_steps", "Max steps", "int", 0, { section: "train", help: "0 = train for the epochs above." }),
  f("batch_size", "Batch size", "int", 2, { section: "more" }),
  f("gradient_accumulation_steps", "Gradient accumulation", "int", 4, { section: "more", help: "Steps whose gradients add up to one update." }),
  f("lora_r", "LoRA rank", "int", 16, { section: "more", adapterOnly: true }),
  f("lora_alpha", "LoRA alpha", "float", 16, { section: "more", adapterOnly: true }),
  f("display_name", "Run name", "text", "", { section: "train", placeholder: "optional", help: "How the run is listed in the history." }),
];

/** Shown under "Advanced", grouped by `section`. */
export const ADVANCED_FIELDS = [
  f("eval_split", "Eval split", "text", "", { section: "Evaluation", help: "Found automatically (validation, val, test) when empty." }),
  f("local_eval_datasets", "Eval files", "list", [], { section: "Evaluation", help: "One path per line." }),
  f("eval_holdout", "Eval holdout share", "float", 0, { section: "Evaluation", help: "Share of training rows held out when there is no eval split (0–0.5)." }),
  f("eval_steps", "Eval every", "float", 0, { section: "Evaluation", help: "0 = no eval; N = every N steps; below 1 = that share of all steps." }),

  f("column_mapping", "Column mapping", "map", {}, { section: "Data", placeholder: "instruction: question\noutput: answer", help: "One `target: your column` per line; targets: instruction, input, output, text, conversations, messages, system, images, image; for embedding models anchor, positive, negative, sentence1, sentence2, score, query, document, label; for preference objectives prompt, chosen, rejected, completion, label; for grpo prompt, reference." }),
  f("role_mapping", "Role mapping", "map", {}, { section: "Data", placeholder: "function_call: tool", help: "One `your role: chat role` per line." }),
  f("train_on_completions", "Train on completions only", "bool", false, { section: "Data", help: "Loss on the assistant's tokens only." }),
  f("streaming", "Stream the dataset", "bool", false, { section: "Data" }),
  f("slice_start", "Slice start", "int", null, { section: "Data", help: "First row to use." }),
  f("slice_end", "Slice end", "int", null, { section: "Data", help: "Row to stop before." }),

  f("lora_dropout", "LoRA dropout", "float", 0, { section: "Adapter", adapterOnly: true }),
  f("target_modules", "Target modules", "list", null, { section: "Adapter", adapterOnly: true, placeholder: "q_proj\nv_proj", help: "One per line; empty = all attention and MLP projections." }),
  f("gradient_checkpointing", "Gradient checkpointing", "tristate", null, { section: "Adapter", help: "Saves memory at some speed; auto = on with CUDA, off on CPU." }),
  f("load_in_4bit", "Load in 4-bit", "bool", false, { section: "Adapter", help: "Needs a CUDA GPU; QLoRA turns it on." }),

  f("vision_image_size", "Longest image side", "int", 512, { section: "Vision", help: "Pixels; every image is shrunk to this before the processor sees it. Vision-language models only." }),
  f("finetune_vision_layers", "Train vision layers", "bool", true, { section: "Vision", help: "Train the vision tower and its projector (adapter targets, or weights in full fine-tuning)." }),
  f("finetune_language_layers", "Train language layers", "bool", true, { section: "Vision", help: "Train the language model's layers." }),
  f("finetune_attention_modules", "Train attention", "bool", true, { section: "Vision", help: "Train attention projections (text models too)." }),
  f("finetune_mlp_modules", "Train MLP", "bool", true, { section: "Vision", help: "Train MLP and other non-attention linear layers (text models too)." }),
  f("skip_bad_images", "Skip bad images", "bool", false, { section: "Vision", help: "Skip (and report) rows whose image is missing or unreadable instead of ending the run." }),

  f("beta", "Preference beta", "float", null, { section: "Preference", help: "dpo, orpo, simpo, kto, grpo only: how strongly the preference counts (grpo: the KL penalty against the base; kl is then charted). Empty: 0.1 (dpo, orpo, kto), 2.0 (simpo) or 0 (grpo)." }),
  f("rewards", "Rewards", "jsonlist", [], { section: "GRPO", placeholder: '{"name": "exact_match", "weight": 1}\n{"name": "regex", "pattern": "^The answer", "weight": 0.5}', help: "grpo only: one reward per line, summed with its weight. name: exact_match or contains (against the reference answer), regex (pattern), length (max_chars), json, python (path, function; needs `tunelab serve --allow-reward-code` and a file in the data roots)." }),
  f("num_generations", "Generations per prompt", "int", null, { section: "GRPO", help: "grpo only: completions sampled per prompt (2 or more); batch size × accumulation must be a multiple of it. Empty: 4." }),
  f("max_completion_length", "Max completion tokens", "int", null, { section: "GRPO", help: "grpo only: the most tokens generated per completion. Empty: 64." }),
  f("temperature", "Sampling temperature", "float", null, { section: "GRPO", help: "grpo only: higher gives more varied completions. Empty: 1.0." }),
  f("speech_language", "Transcript language", "text", null, { section: "Speech", placeholder: "en", help: "Speech-to-text models only: the transcripts' language for a multilingual model (e.g. en), used for the labels, eval and the saved generation_config. Empty: the tokenizer's own language, else the one the model detects in the first training clips." }),
  f("skip_bad_audio", "Skip bad audio", "bool", false, { section: "Speech", help: "Skip (and report) rows whose clip is missing, unreadable, empty or too long for the model instead of ending the run." }),
  f("finetune_audio_layers", "Train audio layers", "bool", false, { section: "Speech", help: "Audio chat models (Qwen2-Audio) only: train the audio tower and its projector too. Off: only the language model trains." }),
  f("tts_codec", "TTS codec", "text", null, { section: "Speech", placeholder: "hubertsiuzdak/snac_24khz", help: "Text-to-speech models only: the SNAC codec folder or hub repo. Empty: the model folder's codec/, else hubertsiuzdak/snac_24khz." }),
  f("tts_sample_text", "TTS sample sentence", "text", null, { section: "Speech", placeholder: "the first eval row's text", help: "Text-to-speech models only: spoken into samples/step-N.wav at each eval and played beside the loss chart." }),
  f("embedding_loss", "Embedding loss", "select", "auto", { section: "Embedding", options: ["auto", "mnrl", "cached_mnrl", "triplet", "cosent", "angle", "cosine", "contrastive", "online_contrastive"], help: "Embedding models only. auto: in-batch negatives ranking for pairs and triplets, CoSENT for scored pairs, online contrastive for labelled pairs." }),
  f("matryoshka_dims", "Matryoshka dimensions", "intlist", null, { section: "Embedding", placeholder: "256, 128, 64", help: "Embedding models only: also train these leading dimensions to work alone." }),

  f("warmup_steps", "Warmup steps", "int", null, { section: "Optimiser", help: "Set this or the warmup ratio, not both." }),
  f("warmup_ratio", "Warmup ratio", "float", null, { section: "Optimiser" }),
  f("weight_decay", "Weight decay", "float", 0.001, { section: "Optimiser" }),
  f("embedding_learning_rate", "Embedding learning rate", "float", null, { section: "Optimiser", help: "Own rate for embed_tokens / lm_head (2-10x below the learning rate) when teaching a new domain or language; with LoRA they then train whole." }),
  f("max_grad_norm", "Gradient clip", "float", 1, { section: "Optimiser", help: "0 disables clipping." }),
  f("max_grad_leaf_norm", "Clip each parameter", "float", null, { section: "Optimiser", help: "Clip each parameter's gradient to this norm (after the gradient clip). Empty or 0: off. Torch backend only." }),
  f("max_grad_value", "Clip each element", "float", null, { section: "Optimiser", help: "Clip every gradient element to ± this value (last, before the optimizer step). Empty or 0: off. Torch backend only." }),
  f("lr_scheduler_type", "LR schedule", "text", "linear", { section: "Optimiser", help: "linear, cosine, constant, …" }),
  f("optim", "Optimiser", "text", "adamw_torch_fused", { section: "Optimiser" }),
  f("seed", "Seed", "int", 3407, { section: "Optimiser" }),
  f("packing", "Packing", "bool", false, { section: "Optimiser", help: "Pack short rows together: faster on short data." }),
  f("precision", "Precision", "select", "auto", { section: "Optimiser", options: ["auto", "fp32", "bf16", "fp16"] }),
  f("save_steps", "Save every", "int", 0, { section: "Optimiser", help: "Checkpoint every N steps; 0 = only at the end." }),
  f("save_total_limit", "Checkpoints kept", "int", null, { section: "Optimiser", help: "Empty = keep all." }),
  f("logging_steps", "Log every", "int", 1, { section: "Optimiser" }),

  f("trust_remote_code", "Trust remote code", "bool", false, { section: "Model access", help: "Lets the model's own code (its auto_map files) run on this machine." }),
  f("approved_remote_code_fingerprint", "Approved code fingerprint", "text", "", { section: "Model access", placeholder: "64 hex characters", help: "With trust remote code: the run loads only code with this fingerprint. The memory estimate shows the model's code files and their fingerprint; review them first." }),
  f("hf_token", "Hub token", "secret", "", { section: "Model access", help: "Never stored or saved to YAML." }),

  f("report_to", "Report to", "select", "none", { section: "Tracking", options: ["none", "tensorboard", "wandb", "mlflow"] }),
  f("wandb_project", "W&B project", "text", "", { section: "Tracking" }),
  f("wandb_token", "W&B token", "secret", "", { section: "Tracking" }),
  f("tensorboard_dir", "TensorBoard folder", "text", "", { section: "Tracking" }),
  f("mlflow_tracking_uri", "MLflow tracking URI", "text", "", { section: "Tracking" }),
  f("mlflow_experiment", "MLflow experiment", "text", "", { section: "Tracking" }),

  f("backend", "Backend", "select", "auto", { section: "Hardware and output", options: ["auto", "torch", "mlx"] }),
  f("gpu_ids", "GPU ids", "intlist", null, { section: "Hardware and output", placeholder: "0, 1", help: "Several ids train data-parallel, one process per GPU. Empty = choose by free memory." }),
  f("num_gpus", "Number of GPUs", "int", null, { section: "Scale out", help: "Train data-parallel on this many GPUs, chosen by free memory (instead of GPU ids)." }),
  f("num_processes", "Processes per node", "int", null, { section: "Scale out", help: "One per GPU by default; on a CPU-only machine, N gloo processes." }),
  f("distributed", "Distributed strategy", "select", "auto", { section: "Scale out", options: ["auto", "ddp", "fsdp"], help: "auto: DDP for adapters, FSDP2 for full fine-tuning." }),
  f("nodes.count", "Nodes", "int", null, { section: "Scale out", help: "Several machines: run `tunelab train CONFIG --node-rank N` on each other machine; this server is the head." }),
  f("nodes.master_addr", "Head address", "text", "", { section: "Scale out", help: "This machine's address as the other nodes reach it." }),
  f("nodes.master_port", "Rendezvous port", "int", 29500, { section: "Scale out" }),
  f("nodes.rdzv_endpoint", "c10d rendezvous", "text", "", { section: "Scale out", placeholder: "host:port", help: "Instead of head address and port." }),
  f("nodes.node_rank", "Node rank", "int", 0, { section: "Scale out", help: "0: this machine is the head that records the run." }),
  f("nodes.join_timeout_s", "Join timeout (s)", "float", 300, { section: "Scale out" }),
  f("ray_address", "Ray cluster", "text", "", { section: "Scale out", placeholder: "auto or host:6379", help: "Place the run's workers on a Ray cluster (the server must allow it)." }),
  f("queue", "Wait in the queue", "bool", true, { section: "Hardware and output", help: "When the devices this run needs are busy, wait in the server's queue and start when they are free; off: refuse the start instead." }),
  f("memory_fit", "Memory check", "select", "refuse", { section: "Hardware and output", options: ["refuse", "auto", "off"], help: "Before a start: refuse a run whose memory estimate exceeds the GPU's free memory, or auto: checkpointing on and a smaller micro-batch with more accumulation until it fits." }),
  f("output_dir", "Output folder", "text", "", { section: "Hardware and output", help: "Empty = a new folder under the outputs root." }),
  f("allow_output_outside_root", "Allow output outside the root", "bool", false, { section: "Hardware and output" }),
  f("resume_from", "Resume from", "text", "", { section: "Hardware and output", help: "A checkpoint folder or a run id." }),
  f("export_after", "Export when done", "select", "", { section: "Hardware and output", options: [["", "no"], "merged", "adapter"], help: "Export the run as it completes, in the training process: merged (base + adapter in one model) into export-merged, or the adapter into export-adapter. A failed export leaves the run completed." }),
];

export const ALL_FIELDS = [...BASIC_FIELDS, ...ADVANCED_FIELDS];

/** RunConfig fields the form expresses through the method picker rather than inputs. */
export const METHOD_FIELDS = ["training_type", "use_dora", "use_rslora", "use_loftq"];
