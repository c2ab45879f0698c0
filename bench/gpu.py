"""GPU benchmark: LoRA on a random-init ~1B Llama — tunelab's worker against plain TRL,
with and without packing. Tokens/s and MFU.

    python bench/gpu.py [--reps 2] [--steps 30] [--peak-tflops 989] [--json out.json]

Needs a CUDA GPU and stops with a message saying so without one; one command, about 4-5
minutes on an H100-class GPU (it stops starting new runs after 7). The model has
TinyLlama's shape (hidden 2048, 22 layers, 32 heads / 4 key-value heads, MLP 5632,
vocab 32,000: 1.1B parameters), random weights, built once on the GPU and cached in
bench/out/cache. Data: the skewed-length rows of the CPU benchmarks (lognormal, median
64 tokens, up to 1,024), batch 8, max length 1,024. Both arms use their defaults on
CUDA (bf16, gradient checkpointing) with identical settings.

MFU = tokens/s x FLOPs per token / the GPU's peak dense bf16 FLOP/s. FLOPs per token are
4·N for LoRA (forward 2N, backward through the frozen weights 2N; no weight gradients)
and would be 6·N for full fine-tuning; N counts the weights used in matrix multiplies
(everything but the input embedding). Tokens are real (non-padding) tokens, so padding
shows up as lost MFU.

It also records the memory estimate (tunelab.memory_plan) of the packed LoRA run against
its measured peak, torch.cuda.max_memory_allocated from the start of training.

On a machine with several GPUs it also reports DDP scaling efficiency: tokens/s on all
of them (one rank per GPU, the same batch per GPU) ÷ (GPUs × tokens/s on one).

`--cpu-smoke` runs the same code on a tiny model on the CPU to check the script itself;
its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from assets import CACHE, larger_assets
from runs import plain_run, tunelab_run
from sidebyside import alternate, ratios, spread

TIME_LIMIT_S = 7 * 60
WARMUP_STEPS = 5
# Peak dense bf16 tensor FLOP/s by GPU name (without sparsity).
PEAK_TFLOPS = {"H200": 989, "H100 SXM": 989, "H100 80GB HBM3": 989, "H100 PCIe": 756, "H100": 756, "H800": 989,
               "A100": 312, "A800": 312, "L40S": 362, "L40": 181, "L4": 121, "A10G": 125, "A10": 125,
               "RTX 4090": 165, "RTX 6000 Ada": 364}
SHAPE_1B = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
SHAPE_SMOKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=8192, max_position_embeddings=2048)


def build_model(shape: dict, folder: Path, cuda: bool) -> int:
    """Save a random-init Llama of `shape` (bf16) with the bench tokenizer; return N."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(larger_assets().model_dir)
    config = LlamaConfig(**shape, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False, dtype="bfloat16")
    if not (folder / "config.json").exists():
        torch.manual_seed(0)
        with torch.device("cuda" if cuda else "cpu"):
            model = LlamaForCausalLM(config).to(torch.bfloat16)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        del model
    embedding = shape["vocab_size"] * shape["hidden_size"]
    with torch.device("meta"):
        total = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    return total - embedding


def peak_flops(override: float | None) -> tuple[float | None, str]:
    import torch

    if override:
        return override * 1e12, f"--peak-tflops {override:g}"
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    for key, tflops in PEAK_TFLOPS.items():
        if key in name:
            return tflops * 1e12, f"{name}: {tflops} TFLOP/s dense bf16"
    return None, f"{name}: peak unknown (pass --peak-tflops for MFU)"


def main() -> None:
    parser = argparse.ArgumentParser(description="LoRA tokens/s and MFU on a ~1B Llama: tunelab vs plain TRL")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--peak-tflops", type=float, help="the GPU's peak dense bf16 TFLOP/s, if not in the table")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model on the CPU: checks the script only")
    args = parser.parse_args()
    started = time.monotonic()

    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.cpu_smoke:
        print("bench/gpu.py needs a CUDA GPU and torch sees none (torch.cuda.is_available() is False); "
              "run it on a machine with an NVIDIA GPU and a CUDA build of torch.", file=sys.stderr)
        raise SystemExit(2)
    steps = 6 if args.cpu_smoke else args.steps
    reps = 1 if args.cpu_smoke else args.reps
    shape = SHAPE_SMOKE if args.cpu_smoke else SHAPE_1B
    folder = CACHE / ("gpu-smoke" if args.cpu_smoke else "gpu-llama-1b")
    print("building the model (once)…", flush=True)
    n = build_model(shape, folder, cuda)
    peak, peak_note = peak_flops(args.peak_tflops)
    data = str(larger_assets().skewed)
    print(f"N = {n / 1e9:.3f}B matmul weights; {peak_note}", flush=True)

    figures = {}
    for packing in (False, True):
        if time.monotonic() - started > TIME_LIMIT_S:
            print("time limit reached; skipping the remaining runs")
            break
        shared = dict(max_steps=steps, batch_size=args.batch_size, learning_rate=2e-4, lora_r=16, lora_alpha=16,
                      seed=3407, packing=packing)
        ours = dict(model_name=str(folder), local_datasets=[data], max_seq_length=1024, gradient_accumulation_steps=1,
                    **shared)
        theirs = dict(model=str(folder), data=data, max_length=1024, trl_defaults=True, cuda=cuda,
                      dtype="bfloat16", **shared)
        runs = alternate([("tunelab", lambda: tunelab_run(ours)), ("plain TRL", lambda: plain_run(theirs))], reps)
        skip = min(WARMUP_STEPS, steps - 2)
        for arm, logs in runs.items():
            speeds = [log.tokens_per_s(skip) for log in logs]
            figures[f"{arm}, {'packed' if packing else 'padded'}"] = {
                "tokens_per_s": spread(speeds).median, "spread": [min(speeds), max(speeds)],
                "mfu": spread(speeds).median * 4 * n / peak if peak else None,
            }
        figures[f"tunelab ÷ plain TRL, {'packed' if packing else 'padded'}"] = {
            "ratio": ratios([log.tokens_per_s(skip) for log in runs["tunelab"]],
                            [log.tokens_per_s(skip) for log in runs["plain TRL"]]).median}
        if packing:  # every packed batch is exactly batch x max length tokens: what the estimate assumes
            figures["memory estimate, packed"] = memory_check(ours, runs["tunelab"], cuda)

    gpus = torch.cuda.device_count() if cuda else 0
    if gpus >= 2 and time.monotonic() - started < TIME_LIMIT_S:
        figures[f"scaling efficiency, {gpus} GPUs"] = scaling(folder, data, steps, args.batch_size, gpus)

    print(f"\nLoRA r16 on a random-init {n / 1e9:.2f}B Llama, batch {args.batch_size}, max length 1,024, "
          f"skewed lengths; {steps} steps per run, {reps} run(s) per arm ({time.monotonic() - started:.0f} s)")
    for name, row in figures.items():
        if "estimated_gib" in row:
            print(f"  {name:<32} estimated {row['estimated_gib']:.2f} GiB vs {row['measured_gib']:.2f} GiB "
                  f"max_memory_allocated ({row['error'] * 100:+.0f}%)")
        elif "efficiency" in row:
            print(f"  {name:<32} {row['efficiency']:.3f}  ({row['tokens_per_s_many']:,.0f} vs {row['tokens_per_s_one']:,.0f} tokens/s)")
        elif "ratio" in row:
            print(f"  {name:<32} {row['ratio']:.3f}")
        else:
            mfu = f"{row['mfu'] * 100:.1f}%" if row["mfu"] is not None else "n/a"
            print(f"  {name:<32} {row['tokens_per_s']:>10,.0f} tokens/s   MFU {mfu}")
    if args.json:
        Path(args.json).write_text(json.dumps({"n_params": n, "peak": peak_note, "figures": figures}, indent=1))


def memory_check(settings: dict, logs: list, cuda: bool) -> dict:
    """tunelab.memory_plan's estimate of the run (without the CUDA context, which
    max_memory_allocated does not count) against the worker's peak: torch.cuda.max_memory_allocated
    from training's start (its progress events' peak_memory_gb), the largest over the runs."""
    from tunelab.config import parse_config
    from tunelab.memory_plan import estimate, read_model_config, settings_for, shape_from_config

    cfg = parse_config(settings)
    plan = estimate(shape_from_config(read_model_config(cfg.model_name)), settings_for(cfg, cuda=cuda, world_size=1))
    measured = max(log.facts.get("peak_memory_gb", 0.0) for log in logs) * 2**30
    return {"estimated_gib": plan.tensor_bytes / 2**30, "measured_gib": measured / 2**30,
            "error": plan.tensor_bytes / measured - 1 if measured else float("nan"),
            "terms_gib": {t.name: round(t.bytes / 2**30, 3) for t in plan.terms}}


def scaling(folder: Path, data: str, steps: int, batch_size: int, gpus: int) -> dict:
    """Weak scaling of DDP: tokens/s on every GPU (torchrun, one rank per GPU, the same
    batch per GPU) ÷ (GPUs × tokens/s on one). Each arm is pinned with CUDA_VISIBLE_DEVICES."""
    base = dict(model_name=str(folder), local_datasets=[data], max_seq_length=1024, gradient_accumulation_steps=1,
                max_steps=steps, batch_size=batch_size, learning_rate=2e-4, lora_r=16, lora_alpha=16, seed=3407)
    one = tunelab_run(base, env={"CUDA_VISIBLE_DEVICES": "0"})
    many = tunelab_run({**base, "num_processes": gpus}, env={"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(gpus)))})
    skip = min(WARMUP_STEPS, steps - 2)
    single, together = one.tokens_per_s(skip), many.tokens_per_s(skip)
    return {"efficiency": together / (gpus * single), "tokens_per_s_one": single, "tokens_per_s_many": together}


if __name__ == "__main__":
    main()
