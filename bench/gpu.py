"""GPU benchmark: LoRA on a random-init ~1B Llama — tunelab's worker against plain TRL,
with and without packing. Tokens/s and MFU.

    python bench/gpu.py [--reps 2] [--steps 30] [--peak-tflops 989] [--json out.json]

Needs a CUDA GPU and stops with a message saying so without one; one command, about 4-5
minutes on an H100-class GPU (it stops starting new runs after 7, and each run is ended
after --run-limit seconds). The model has
TinyLlama's shape (hidden 2048, 22 layers, 32 heads / 4 key-value heads, MLP 5632,
vocab 32,000: 1.1B parameters), random weights, built once on the GPU and cached in
bench/out/cache. Data: the skewed-length rows of the CPU benchmarks (lognormal, median
64 tokens, up to 1,024), batch 8, max length 1,024. Both arms train in bf16 with identical
settings; gradient checkpointing is what `tunelab train` would choose for the run on this
GPU (tunelab.orchestrator.memory_check.fit_memory: off where the memory estimate fits
without it, else on), given to both arms, and reported.

MFU = tokens/s x FLOPs per token / the GPU's peak dense bf16 FLOP/s. FLOPs per token are
4·N for LoRA (forward 2N, backward through the frozen weights 2N; no weight gradients)
and would be 6·N for full fine-tuning; N counts the weights used in matrix multiplies
(everything but the input embedding). Tokens are real (non-padding) tokens, so padding
shows up as lost MFU. The headline tokens/s and MFU count every step after the warm-up;
beside them, labelled, the same without the slowest 10% of steps (as in the CPU
benchmarks, where other processes interrupt steps; on a GPU of its own a slow step is the
run's own).

Each arm runs pinned to one GPU (CUDA_VISIBLE_DEVICES, --gpu), and the parent never
touches CUDA: the model is built, and the GPU looked up, in a child of its own, so the
arms have the whole GPU. Per arm it records the peak torch.cuda.max_memory_allocated from
the start of training, and checks that both arms trained the same steps on the same
tokens with losses within LOSS_TOLERANCE of each other. The peak FLOP/s come from a table
matched on the GPU's name and memory (H100 SXM / PCIe / NVL, H200 / H200 NVL, ...),
scaled by the share of the full chip's SMs the device has, so a MIG slice gets its own
peak. It also records the memory estimate (tunelab.memory.plan) of the packed LoRA run
against its measured peak.

On a machine with several GPUs it also reports DDP scaling efficiency: tokens/s on all
of them (one rank per GPU, the same batch per GPU) ÷ (GPUs × tokens/s on one).

`--cpu-smoke` runs the same code on a tiny model on the CPU to check the script itself;
its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from assets import CACHE, larger_assets
from runs import TRIM, TRIMMED_LABEL, plain_run, tunelab_run
from sidebyside import alternate, ratios, spread

TIME_LIMIT_S = 7 * 60
RUN_LIMIT_S = 150  # one arm's run, from launch to its last step
WARMUP_STEPS = 5
# bf16 kernels differ between the arms (attention, fused ops), so losses agree closely, not exactly.
LOSS_TOLERANCE = 0.02


@dataclass(frozen=True)
class Peak:
    """Dense bf16 tensor TFLOP/s (no sparsity) of a full chip with `sms` SMs; `names` must
    all appear in the device name, and `memory_gib` (low, high) brackets its memory."""
    names: tuple[str, ...]
    memory_gib: tuple[float, float]
    tflops: float
    sms: int


# Most specific first. Memory tells apart parts that share a name (H100 SXM 80 GB, H100
# NVL 94 GB). A MIG slice's name carries the parent's and its own SMs scale the peak.
PEAKS = (
    Peak(("H200", "NVL"), (130, 150), 835, 132),
    Peak(("GH200",), (90, 150), 989, 132),
    Peak(("H200",), (130, 150), 989, 132),
    Peak(("H100", "NVL"), (88, 100), 835, 132),
    Peak(("H100", "PCIe"), (75, 85), 756, 114),
    Peak(("H100",), (88, 100), 835, 132),  # a 94 GB H100 without "NVL" in its name is the NVL part
    Peak(("H100",), (75, 85), 989, 132),  # "H100 80GB HBM3": SXM
    Peak(("H800", "PCIe"), (75, 85), 756, 114),
    Peak(("H800",), (75, 85), 989, 132),
    Peak(("A100",), (35, 85), 312, 108),
    Peak(("A800",), (35, 85), 312, 108),
    Peak(("L40S",), (40, 50), 362, 142),
    Peak(("L40",), (40, 50), 181, 142),
    Peak(("L4",), (20, 26), 121, 58),
    Peak(("A10G",), (20, 26), 70, 80),
    Peak(("A10",), (20, 26), 125, 72),
    Peak(("RTX 4090",), (20, 26), 165, 128),
    Peak(("RTX 6000 Ada",), (44, 50), 364, 142),
)


def match_peak(name: str, memory_gib: float, sms: int) -> tuple[float | None, str]:
    """Peak dense bf16 FLOP/s of the device (None if unknown) and how it was found. A MIG
    slice reports the memory of its slice, not the chip's: the chip's is read from the
    name where it says ("H100 80GB HBM3 MIG 1g.10gb"), else not checked; a slice's peak is
    the chip's times its share of the SMs."""
    import re

    chip, mig, _ = name.partition("MIG")
    chip_memory: float | None = memory_gib
    if mig:
        stated = re.search(r"(\d+)GB", chip)
        chip_memory = float(stated.group(1)) if stated else None
    for peak in PEAKS:
        fits = chip_memory is None or peak.memory_gib[0] <= chip_memory <= peak.memory_gib[1]
        if all(part in chip for part in peak.names) and fits:
            share = min(1.0, sms / peak.sms)
            tflops = peak.tflops * share
            slice_note = f" × {sms}/{peak.sms} SMs" if share < 1 else ""
            return tflops * 1e12, (f"{name} ({memory_gib:.0f} GiB, {sms} SMs): {peak.tflops:g}{slice_note} = "
                                   f"{tflops:.0f} TFLOP/s dense bf16")
    return None, f"{name} ({memory_gib:.0f} GiB, {sms} SMs): peak unknown (pass --peak-tflops for MFU)"


SHAPE_1B = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)
SHAPE_SMOKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=8192, max_position_embeddings=2048)


def build_model(shape: dict, folder: Path, cuda: bool) -> dict:
    """Save a random-init Llama of `shape` (bf16) with the bench tokenizer; return N and,
    with CUDA, the device's name, memory, SMs and compute capability. Runs in a child
    (`build_in_child`), so the CUDA memory and context it uses are gone before the first
    arm starts."""
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
    facts = {"n": total - embedding}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        facts.update(name=props.name, memory_gib=props.total_memory / 2**30, sms=props.multi_processor_count,
                     capability=[props.major, props.minor])
    return facts


def build_in_child(shape: dict, folder: Path, gpu: str | None, cuda: bool) -> dict:
    """`build_model` in a child interpreter (on the GPU `gpu`, else the inherited
    CUDA_VISIBLE_DEVICES; on the CPU without `cuda`); its facts."""
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {})}
    argv = ([sys.executable, __file__, "--build", str(folder), "--build-shape", json.dumps(shape)]
            + ([] if cuda else ["--cpu-smoke"]))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S * 2)
    if done.returncode != 0:
        raise SystemExit(f"building the model failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def peak_flops(override: float | None, facts: dict) -> tuple[float | None, str]:
    if override:
        return override * 1e12, f"--peak-tflops {override:g}"
    if "name" not in facts:
        return None, "CPU: no peak (smoke run)"
    return match_peak(facts["name"], facts["memory_gib"], facts["sms"])


def same_work(ours: list, theirs: list) -> dict:
    """Whether the arms' runs trained the same steps on the same tokens, and their largest loss gap."""
    steps = all(a.steps == b.steps for a, b in zip(ours, theirs, strict=True))
    tokens = all(a.tokens == b.tokens for a, b in zip(ours, theirs, strict=True))
    gap = max((abs(x - y) for a, b in zip(ours, theirs) for x, y in zip(a.losses, b.losses)
               if x is not None and y is not None), default=float("nan"))
    return {"same_steps": steps, "same_tokens": tokens, "largest_loss_gap": gap,
            "losses_agree": gap <= LOSS_TOLERANCE}


def main() -> None:
    parser = argparse.ArgumentParser(description="LoRA tokens/s and MFU on a ~1B Llama: tunelab vs plain TRL")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--gpu", default="0", help="the GPU every arm is pinned to (CUDA_VISIBLE_DEVICES), default 0")
    parser.add_argument("--run-limit", type=float, default=RUN_LIMIT_S, help="seconds one arm's run may take")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's peak dense bf16 TFLOP/s, if not in the table")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny model on the CPU: checks the script only")
    parser.add_argument("--build", help=argparse.SUPPRESS)  # internal: build the model in this child, print facts
    parser.add_argument("--build-shape", help=argparse.SUPPRESS)  # internal: the model's shape (JSON)
    args = parser.parse_args()
    started = time.monotonic()

    if args.build:
        import torch

        shape = json.loads(args.build_shape)
        print(json.dumps(build_model(shape, Path(args.build), torch.cuda.is_available() and not args.cpu_smoke)))
        return
    cuda = False if args.cpu_smoke else cuda_visible()
    if not cuda and not args.cpu_smoke:
        print("bench/gpu.py needs a CUDA GPU and torch sees none (torch.cuda.is_available() is False in a child "
              "process); run it on a machine with an NVIDIA GPU and a CUDA build of torch, or pass --cpu-smoke "
              "to check the script itself on the CPU.", file=sys.stderr)
        raise SystemExit(2)
    steps = 6 if args.cpu_smoke else args.steps
    reps = 1 if args.cpu_smoke else args.reps
    folder = CACHE / ("gpu-smoke" if args.cpu_smoke else "gpu-llama-1b")
    pin = {"CUDA_VISIBLE_DEVICES": args.gpu} if cuda else {}
    print("building the model (once, in a child)…", flush=True)
    facts = build_in_child(SHAPE_SMOKE if args.cpu_smoke else SHAPE_1B, folder, args.gpu if cuda else None, cuda)
    n = facts["n"]
    peak, peak_note = peak_flops(args.peak_tflops, facts)
    device = f"{facts['name']} (CUDA_VISIBLE_DEVICES={args.gpu})" if cuda else "CPU (smoke run)"
    data = str(larger_assets().skewed)
    print(f"N = {n / 1e9:.3f}B matmul weights; {peak_note}", flush=True)

    figures, checks = {}, {}
    for packing in (False, True):
        layout = "packed" if packing else "padded"
        if time.monotonic() - started > TIME_LIMIT_S:
            print(f"time limit reached; skipping the {layout} runs")
            checks[f"{layout} runs done within the time limit"] = False
            continue
        shared = dict(max_steps=steps, batch_size=args.batch_size, learning_rate=2e-4, lora_r=16, lora_alpha=16,
                      seed=3407, packing=packing)
        ours = dict(model_name=str(folder), local_datasets=[data], max_seq_length=1024, gradient_accumulation_steps=1,
                    **shared)
        theirs = dict(model=str(folder), data=data, max_length=1024, trl_defaults=True, cuda=cuda,
                      dtype="bfloat16", **shared)
        if cuda:
            checkpointing, note = checkpointing_as_tunelab_decides(ours, args.gpu)
            ours["gradient_checkpointing"] = theirs["activation_checkpointing"] = checkpointing
            figures[f"gradient checkpointing, {layout}"] = {"on": checkpointing, "why": note}
        try:
            runs = alternate([("tunelab", lambda: tunelab_run(ours, env=pin, timeout_s=args.run_limit)),
                              ("plain TRL", lambda: plain_run(theirs, env=pin, timeout_s=args.run_limit))], reps)
        except RuntimeError as error:  # a run over its limit, or failed: say which, keep what was measured
            print(f"{layout} runs stopped: {error}")
            checks[f"{layout} runs finished within {args.run_limit:.0f} s each"] = False
            continue
        skip = min(WARMUP_STEPS, steps - 2)
        for arm, logs in runs.items():
            figures[f"{arm}, {layout}"] = {
                **throughput(logs, skip, n, peak),
                "peak_allocated_gib": max(log.facts.get("peak_memory_gb", 0.0) for log in logs) if cuda else None,
            }
        figures[f"tunelab setup, {layout}"] = {"setup": next(
            (m for m in runs["tunelab"][0].facts.get("statuses", []) if m.startswith("Setting up")), "?")}
        figures[f"tunelab ÷ plain TRL, {layout}"] = {
            "ratio": ratios([log.tokens_per_s(skip, trim=0) for log in runs["tunelab"]],
                            [log.tokens_per_s(skip, trim=0) for log in runs["plain TRL"]]).median,
            "ratio_trimmed": ratios([log.tokens_per_s(skip, TRIM) for log in runs["tunelab"]],
                                    [log.tokens_per_s(skip, TRIM) for log in runs["plain TRL"]]).median}
        work = same_work(runs["tunelab"], runs["plain TRL"])
        figures[f"same work, {layout}"] = work
        checks[f"{layout}: same steps in both arms"] = work["same_steps"]
        checks[f"{layout}: same tokens in both arms"] = work["same_tokens"]
        checks[f"{layout}: losses within {LOSS_TOLERANCE:g}"] = work["losses_agree"]
        if packing:  # every packed batch is exactly batch x max length tokens: what the estimate assumes
            figures["memory estimate, packed"] = memory_check(ours, runs["tunelab"], cuda)

    gpus = gpu_count() if cuda else 0
    if gpus >= 2 and time.monotonic() - started < TIME_LIMIT_S:
        figures[f"scaling efficiency, {gpus} GPUs"] = scaling(folder, data, steps, args.batch_size, gpus, args.run_limit)

    print(f"\nLoRA r16 on a random-init {n / 1e9:.2f}B Llama on {device}, batch {args.batch_size}, max length 1,024, "
          f"skewed lengths; {steps} steps per run, {reps} run(s) per arm ({time.monotonic() - started:.0f} s)")
    for name, row in figures.items():
        if "estimated_gib" in row:
            print(f"  {name:<32} estimated {row['estimated_gib']:.2f} GiB vs {row['measured_gib']:.2f} GiB "
                  f"max_memory_allocated ({row['error'] * 100:+.0f}%)")
        elif "efficiency" in row:
            print(f"  {name:<32} {row['efficiency']:.3f}  ({row['tokens_per_s_many']:,.0f} vs {row['tokens_per_s_one']:,.0f} "
                  f"tokens/s; {TRIMMED_LABEL}: {row['efficiency_trimmed']:.3f})")
        elif "ratio" in row:
            print(f"  {name:<32} {row['ratio']:.3f}  ({TRIMMED_LABEL}: {row['ratio_trimmed']:.3f})")
        elif "tokens_per_s" in row:
            memory = f"{row['peak_allocated_gib']:.2f} GiB" if row["peak_allocated_gib"] is not None else "n/a"
            print(f"  {name:<32} {describe_throughput(row)}   peak allocated {memory}")
        else:
            print(f"  {name:<32} {row}")
    for name, ok in checks.items():
        print(f"  check: {name} — {'yes' if ok else 'NO'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "n_params": n, "peak": peak_note, "figures": figures,
                                               "checks": checks}, indent=1))
    if not all(checks.values()):
        raise SystemExit(1)


def throughput(logs: list, skip: int, n: int, peak: float | None) -> dict:
    """Median tokens/s (and MFU) over the runs of one arm: every step after `skip` (the
    headline), and beside it the same without the slowest 10% of steps (`trimmed_`)."""
    figures = {}
    for prefix, trim in (("", 0.0), ("trimmed_", TRIM)):
        speeds = [log.tokens_per_s(skip, trim=trim) for log in logs]
        median = spread(speeds).median
        figures.update({f"{prefix}tokens_per_s": median, f"{prefix}spread": [min(speeds), max(speeds)],
                        f"{prefix}mfu": median * 4 * n / peak if peak else None})
    return figures


def describe_throughput(row: dict) -> str:
    """'T tokens/s   MFU M   (slowest 10% of steps dropped: T' tokens/s, MFU M')'."""
    def mfu(value: float | None) -> str:
        return f"{value * 100:.1f}%" if value is not None else "n/a"

    return (f"{row['tokens_per_s']:>10,.0f} tokens/s   MFU {mfu(row['mfu'])}   ({TRIMMED_LABEL}: "
            f"{row['trimmed_tokens_per_s']:,.0f} tokens/s, MFU {mfu(row['trimmed_mfu'])})")


def checkpointing_as_tunelab_decides(settings: dict, gpu: str) -> tuple[bool, str]:
    """Whether a `tunelab train` of `settings` pinned to `gpu` trains with gradient
    checkpointing (the orchestrator's memory check: off where the estimate fits without it
    in the GPU's free memory, read from nvidia-smi, which opens no CUDA context), and why."""
    from tunelab.config.run_config import parse_config
    from tunelab.hardware import list_gpus
    from tunelab.orchestrator.memory_check import fit_memory

    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    try:
        gpus = list_gpus()
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before
    cfg, notes = fit_memory(parse_config(settings), gpus[:1], 1, 1)
    off = cfg.gradient_checkpointing is False
    why = " ".join(notes) or ("the memory estimate needs it on this GPU" if gpus else "no GPU reported its free memory: the CUDA default (on)")
    return not off, why


def cuda_visible() -> bool:
    """torch.cuda.is_available(), asked in a child: this process keeps no CUDA context."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() == "True"


def gpu_count() -> int:
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                                if k != "CUDA_VISIBLE_DEVICES"})
    return int(probe.stdout.strip() or 0)


def memory_check(settings: dict, logs: list, cuda: bool) -> dict:
    """tunelab.memory.plan's estimate of the run (without the CUDA context, which
    max_memory_allocated does not count) against the worker's peak: torch.cuda.max_memory_allocated
    from training's start (its progress events' peak_memory_gb), the largest over the runs."""
    from tunelab.config.run_config import parse_config
    from tunelab.memory.plan import estimate, read_model_config, settings_for, shape_from_config

    cfg = parse_config(settings)
    plan = estimate(shape_from_config(read_model_config(cfg.model_name)), settings_for(cfg, cuda=cuda, world_size=1))
    measured = max(log.facts.get("peak_memory_gb", 0.0) for log in logs) * 2**30
    return {"estimated_gib": plan.tensor_bytes / 2**30, "measured_gib": measured / 2**30,
            "error": plan.tensor_bytes / measured - 1 if measured else float("nan"),
            "terms_gib": {t.name: round(t.bytes / 2**30, 3) for t in plan.terms}}


def scaling(folder: Path, data: str, steps: int, batch_size: int, gpus: int, limit_s: float) -> dict:
    """Weak scaling of DDP: tokens/s on every GPU (torchrun, one rank per GPU, the same
    batch per GPU) ÷ (GPUs × tokens/s on one). Each arm is pinned with CUDA_VISIBLE_DEVICES."""
    base = dict(model_name=str(folder), local_datasets=[data], max_seq_length=1024, gradient_accumulation_steps=1,
                max_steps=steps, batch_size=batch_size, learning_rate=2e-4, lora_r=16, lora_alpha=16, seed=3407)
    one = tunelab_run(base, env={"CUDA_VISIBLE_DEVICES": "0"}, timeout_s=limit_s)
    many = tunelab_run({**base, "num_processes": gpus}, env={"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(gpus)))},
                       timeout_s=limit_s)
    skip = min(WARMUP_STEPS, steps - 2)
    single, together = one.tokens_per_s(skip, trim=0), many.tokens_per_s(skip, trim=0)
    trimmed = many.tokens_per_s(skip, TRIM) / (gpus * one.tokens_per_s(skip, TRIM))
    return {"efficiency": together / (gpus * single), "tokens_per_s_one": single, "tokens_per_s_many": together,
            "efficiency_trimmed": trimmed}


if __name__ == "__main__":
    main()
