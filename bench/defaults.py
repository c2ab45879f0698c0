"""Target 2 — device-aware defaults: tunelab's CPU defaults against TRL's own defaults.

TRL's `SFTConfig` defaults to bf16 autocast and gradient checkpointing — right for a
GPU. On a CPU tunelab never checkpoints (memory is rarely short, the recomputation is
pure cost) and picks the precision by the CPU and the model: fp32, or bf16 autocast
where the CPU multiplies bf16 in hardware and the model is wide enough to gain from it.
Measured on both benchmark models, since they land on different sides of that choice:
the demo's tiny Llama (fp32) and the larger random Llama (hidden 256: bf16 autocast on
a CPU with AVX512-BF16 or AMX). The plain TRL script sets only what the run needs and
leaves precision and checkpointing at TRL's defaults (`use_cpu=True`, which TRL requires
on a CPU); both arms train LoRA on the same rows with the same settings otherwise.

Three checks keep the comparison honest: both arms ran on the same device (on a CUDA
machine the TRL arm is sent to the GPU too), each ran at the precision the details
state (tunelab's setup message against its own rule for this CPU and model; TRL's bf16
flag as it was in force), and both saw the same tokens at every step.
"""

from __future__ import annotations

from assets import demo_assets, larger_assets
from results import Result, standalone
from runs import plain_run, setup_of, tunelab_precision, tunelab_run
from sidebyside import alternate, ratios, spread


def compare(key: str, title: str, model: str, data: str, max_length: int, steps: int, warmup: int, reps: int,
            quick: bool, what: str) -> Result:
    shared = dict(max_steps=steps, batch_size=4, learning_rate=2e-4, lora_r=16, lora_alpha=16, seed=3407)
    ours = dict(model_name=model, local_datasets=[data], max_seq_length=max_length, gradient_accumulation_steps=1,
                **shared)
    theirs = dict(model=model, data=data, max_length=max_length, trl_defaults=True, cuda=cuda_present(), **shared)
    runs = alternate([("tunelab defaults", lambda: tunelab_run(ours)), ("TRL defaults", lambda: plain_run(theirs))],
                     reps)
    speed_ours = [r.tokens_per_s(warmup) for r in runs["tunelab defaults"]]
    speed_theirs = [r.tokens_per_s(warmup) for r in runs["TRL defaults"]]
    setup = next((m for m in runs["tunelab defaults"][0].facts.get("statuses", []) if m.startswith("Setting up")), "?")
    trl_args = runs["TRL defaults"][0].facts
    expected = tunelab_precision(ours)
    ours_setup = [setup_of(r) for r in runs["tunelab defaults"]]
    their_devices = [r.facts.get("model_device", "?").split(":")[0].upper() for r in runs["TRL defaults"]]
    same_device = all(a[0] == b for a, b in zip(ours_setup, their_devices))
    as_stated = (all(p == expected for _, p in ours_setup)
                 and all(r.facts.get("bf16") is True for r in runs["TRL defaults"]))
    same_tokens = all(x.steps == y.steps and x.tokens == y.tokens
                      for x, y in zip(runs["tunelab defaults"], runs["TRL defaults"]))
    return Result(
        key=key, title=title, measures=f"tunelab's CPU defaults tokens/s ÷ TRL's default SFTConfig tokens/s ({what})",
        ratio=ratios(speed_ours, speed_theirs), target=1.5, higher_is_better=True,
        command=f"python bench/defaults.py{' --quick' if quick else ''}",
        details=[
            f"{what}, LoRA r16, batch 4, max {max_length} tokens, {steps} steps; tokens/s after step {warmup}, "
            "slowest 10% of steps left out",
            f"tunelab chose: \"{setup}\", no gradient checkpointing; TRL defaults: bf16={trl_args.get('bf16')}, "
            f"gradient checkpointing={trl_args.get('gradient_checkpointing')}",
            f"tunelab: {spread(speed_ours).text(0)} tokens/s; TRL defaults: {spread(speed_theirs).text(0)} tokens/s",
            f"devices: tunelab {sorted({d for d, _ in ours_setup})}, TRL {sorted(set(their_devices))}; tunelab's rule "
            f"for this machine and model: {expected}",
        ],
        checks={"both arms ran on the same device": same_device,
                f"precision as stated (tunelab {expected}, TRL bf16)": as_stated,
                "same steps and tokens in both arms": same_tokens},
    )


def cuda_present() -> bool:
    import torch

    return torch.cuda.is_available()


UNMET_NOTES = {
    "defaults_larger": "On this CPU (AVX512-BF16) TRL's bf16 default is itself fast for a model this wide, so tunelab "
                       "keeps bf16 autocast too and wins only by leaving gradient checkpointing off (its recomputation "
                       "is 1.35x on the forward and backward of the layers). What stands in the way of more is the "
                       "part both arms share: TRL 1.16 scores every position with its chunked, fused LM head, computing "
                       "log-probs, entropy and top-1 accuracy on every step and recomputing the logits in the backward; "
                       "with a vocabulary of 8,192 over a hidden size of 256, that head is about half of each step "
                       "(profiled: ~33 ms of a ~50 ms forward). Tried: fp32 (1.37x slower than bf16 autocast here), "
                       "bf16 weights instead of fp32 weights under autocast (no faster), checkpointing on and off. On "
                       "the tiny model (2a) and on CPUs without native bf16 the precision choice itself pays.",
}


def measure(quick: bool) -> list[Result]:
    demo, larger = demo_assets(), larger_assets()
    reps = 1 if quick else 3
    return [
        compare("defaults_tiny", "2a. Device-aware defaults, tiny", str(demo.model_dir), str(demo.chatml), 128,
                60 if quick else 120, 10, reps, quick, "demo tiny Llama (hidden 128), chat data"),
        compare("defaults_larger", "2b. Device-aware defaults, larger", str(larger.model_dir), str(larger.uniform), 256,
                12 if quick else 24, 3, reps, quick, "larger random Llama (hidden 256), rows of ~126 tokens"),
    ]


if __name__ == "__main__":
    standalone("defaults", measure, UNMET_NOTES)
