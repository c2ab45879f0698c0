"""A plain TRL + PEFT fine-tuning script — what one would write without tunelab.

It is the yardstick for tunelab's worker: same model, data and settings, nothing of
tunelab imported. Run as `python bench/plain_trl.py '<json settings>'`; it prints one
`BENCH {json}` line per logged step ({"event": "step", "step", "ts", "loss", "num_tokens",
"peak_memory_gb" (CUDA), "peak_rss_gb" (the process's peak resident memory so far)}), one
when its imports are done ({"event": "imported", "ts"}), one with the precision settings in
force ({"event": "args", ...}), one with the model's device and the memory held before the first step ({"event": "placed"}) and
{"event": "done"}. With `save_adapter: true` it saves the adapter in output_dir after training,
with `merged_dir` it also merges the adapter into the base and saves that there (in
`merged_dtype`, default float16) — bench/whole_run.py's whole job; "model_loaded",
"data_loaded", "trained", "adapter_saved" and "merged" events ({"event", "ts"}) mark its phases.

`trl_defaults: true` leaves precision and gradient checkpointing at TRL's defaults
(bf16 + checkpointing); otherwise it trains in fp32 without checkpointing, like
tunelab's CPU defaults (`bf16: true`: bf16 autocast without checkpointing, tunelab's choice
for wider models on a CPU with native bf16). `sampling` sets the Trainer's
`train_sampling_strategy` (e.g. "group_by_length": batches of similar lengths);
`padding_free: true` flattens each batch without padding (no packing: rows stay whole,
so `max_length` is left unset and the data must already fit); `dataset_num_proc` tokenizes
the data in that many processes, as a user with several cores would. Token counts are true
tokens in every layout: padded batches count their attention mask; padding-free batches
hold no padding, so every position counts (TRL's "non_padding" count would compare ids with
the pad id, and leave out every EOS where pad = eos, as in SmolLM2). `cuda: true` trains on the first GPU (with `dtype` for the
frozen base weights, e.g. "bfloat16"); otherwise it runs on the CPU.
"""

import json
import resource
import sys
import time

import torch
from datasets import load_dataset
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback, set_seed
from trl import SFTConfig, SFTTrainer

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def peak_rss_gb() -> float:
    """The process's peak resident memory so far (ru_maxrss: KiB on Linux), as tunelab's worker reports it on a CPU."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024) / 2**30


class PrintSteps(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()  # the peak of training, as tunelab's worker reports it

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            peak = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
            print("BENCH " + json.dumps({"event": "step", "step": state.global_step, "ts": time.time(), "loss": logs["loss"],
                              "num_tokens": state.num_input_tokens_seen, "peak_memory_gb": peak,
                              "peak_rss_gb": peak_rss_gb()}), flush=True)


def main(settings: dict) -> None:
    # Everything above (torch, transformers, peft, trl, datasets) is imported: from here on
    # is what a notebook whose imports already ran would still pay.
    print("BENCH " + json.dumps({"event": "imported", "ts": time.time()}), flush=True)
    tokenizer = AutoTokenizer.from_pretrained(settings["model"])
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    model = AutoModelForCausalLM.from_pretrained(settings["model"], dtype=settings.get("dtype", "float32"),
                                                 device_map={"": 0} if settings.get("cuda") else None)
    model.config.use_cache = False
    mark("model_loaded")
    dataset = load_dataset("json", data_files=settings["data"], split="train")
    mark("data_loaded")

    seed = settings.get("seed", 3407)
    set_seed(seed)  # LoRA's initial weights come from the global generator
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", r=settings.get("lora_r", 16),
                                             lora_alpha=settings.get("lora_alpha", 16), lora_dropout=0.0,
                                             target_modules=TARGETS, bias="none"))
    precision = {} if settings.get("trl_defaults") else {"bf16": bool(settings.get("bf16")),
                                                         "activation_checkpointing": False}
    if "activation_checkpointing" in settings:  # decided by the caller (bench/gpu.py: as tunelab would)
        precision["activation_checkpointing"] = bool(settings["activation_checkpointing"])
    # The baselines a user would try before packing: length-grouped batches, padding-free batches.
    layout = {"train_sampling_strategy": settings["sampling"]} if "sampling" in settings else {}
    if settings.get("padding_free"):
        layout["padding_free"] = True  # TRL refuses a max_length it cannot enforce without packing
    optimizer = {"optim": settings["optim"]} if "optim" in settings else {}  # else TRL's default
    workers = {"dataset_num_proc": settings["dataset_num_proc"]} if settings.get("dataset_num_proc") else {}
    args = SFTConfig(
        output_dir=settings["output_dir"],
        max_steps=settings["max_steps"],
        per_device_train_batch_size=settings.get("batch_size", 4),
        gradient_accumulation_steps=settings.get("gradient_accumulation_steps", 1),
        learning_rate=settings.get("learning_rate", 2e-4),
        weight_decay=settings.get("weight_decay", 0.001),
        warmup_steps=settings.get("warmup_steps", 0),
        max_length=None if settings.get("padding_free") else settings.get("max_length", 1024),
        packing=settings.get("packing", False),
        seed=seed,
        logging_steps=1,
        logging_nan_inf_filter=False,
        include_num_input_tokens_seen="all" if settings.get("padding_free") else "non_padding",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        use_cpu=not settings.get("cuda"),
        **precision,
        **optimizer,
        **layout,
        **workers,
    )
    # Every option in force that bears on speed, memory or what a step holds: the bench writes
    # them into its results, and checks that arms meant to match do.
    print("BENCH " + json.dumps({"event": "args", "bf16": args.bf16, "gradient_checkpointing": args.activation_checkpointing,
                                 "device": str(args.device), "padding_free": args.padding_free,
                                 "sampling": args.train_sampling_strategy, "packing": args.packing,
                                 "dataset_num_proc": args.dataset_num_proc, "optim": str(args.optim),
                                 "batch_size": args.per_device_train_batch_size,
                                 "gradient_accumulation_steps": args.gradient_accumulation_steps,
                                 "max_length": args.max_length, "token_count": args.include_num_input_tokens_seen}),
          flush=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         callbacks=[PrintSteps()])
    # Where the weights ended up: the yardstick must run on the device it is compared on; and the
    # memory held before the first step (resident now, peak so far), as tunelab's worker reports it.
    import psutil

    print("BENCH " + json.dumps({"event": "placed", "device": str(next(trainer.model.parameters()).device),
                                 "memory_before_training_gb": psutil.Process().memory_info().rss / 2**30,
                                 "peak_before_training_gb": peak_rss_gb()}),
          flush=True)
    trainer.train()
    mark("trained")
    if settings.get("save_adapter"):
        trainer.save_model(settings["output_dir"])  # the adapter and the tokenizer
        mark("adapter_saved")
    if settings.get("merged_dir"):
        # What one writes to ship the result: the adapter folded into the base weights, in the
        # half type the run trained toward, saved with its tokenizer.
        merged = trainer.model.merge_and_unload().to(getattr(torch, settings.get("merged_dtype", "float16")))
        merged.save_pretrained(settings["merged_dir"])
        tokenizer.save_pretrained(settings["merged_dir"])
        mark("merged")
    print("BENCH " + json.dumps({"event": "done"}), flush=True)


def mark(event: str) -> None:
    print("BENCH " + json.dumps({"event": event, "ts": time.time()}), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
