"""Target 1 — trainer overhead: tunelab's worker against a plain TRL + PEFT script.

Both train the demo's tiny Llama with LoRA on the same chat data with the same settings
(batch 4, 128 tokens, same seed, the precision tunelab picks for this CPU), and both on
padding-free batches: tunelab's worker does so on a CPU by default, and the plain script is
given TRL's `padding_free=True`, as a competent user would. Tokens/s is measured inside
each process over the same steps (after a warm-up; every step counts, the figure without
the slowest 10% beside it), and the loss curves must be equal within 1e-4 — the same
training, so any throughput gap is tunelab's own cost (progress events, stop checks). The
tiny model keeps steps short, which makes a fixed per-step cost as visible as it can be.

Off CUDA the two arms' LM heads differ: TRL's fused head scores every position with plain
torch ops there, tunelab's worker scores the labelled positions in one pass
(`tunelab/worker/families/text/direct_lm_head.py`); the equal loss curves show it is the same training.
bench/real_model.py measures what that changes on a real model.
"""

from __future__ import annotations

from assets import demo_assets
from results import Result, standalone
from runs import (disagreements, plain_options, plain_run, speed_ratios, speed_text, tunelab_options, tunelab_precision,
                  tunelab_run)
from sidebyside import alternate, spread

WARMUP_STEPS = 10
LOSS_TOLERANCE = 1e-4

UNMET_NOTES = {
    "overhead": "No cost of tunelab's own shows beyond the noise: the loss curves are identical, and the two arms' "
                "median speeds agree (see the details); the per-repetition ratios scatter by about ±7% because a run's "
                "speed on two shared cores varies that much from process to process, so their median can land below "
                "0.97. tunelab's own per-step work is one progress event on a multiprocessing queue and one stop-flag "
                "check. What was found and fixed on the way: the worker handed TRL two columns its collator never "
                "uses (labels equal to the input ids, and a completion mask), which the data loader fetched and "
                "converted for every row (5% of a step here), and it used unfused AdamW where transformers now "
                "defaults to the fused one. Tried for the noise: alternating arms, 10 repetitions of 300 steps, "
                "and the figure with the slowest 10% of steps of each run dropped beside the headline.",
}


def measure(quick: bool) -> list[Result]:
    demo = demo_assets()
    # The quick form's 60 steps and 2 repetitions scattered from 0.75 to 1.17 around a ratio of ~1.1
    # (the full form's 10 repetitions): 50 measured steps of ~10 ms are half a second of data.
    steps, reps = (150, 4) if quick else (300, 10)
    shared = dict(max_steps=steps, batch_size=4, learning_rate=3e-3, lora_r=16, lora_alpha=32, seed=3407,
                  warmup_steps=5, weight_decay=0.001, optim="adamw_torch_fused")
    tunelab_settings = dict(model_name=str(demo.model_dir), local_datasets=[str(demo.chatml)], max_seq_length=128,
                            gradient_accumulation_steps=1, **shared)
    precision = tunelab_precision(tunelab_settings)
    plain_settings = dict(model=str(demo.model_dir), data=str(demo.chatml), max_length=128, padding_free=True,
                          bf16=precision == "bf16", **shared)
    runs = alternate([("tunelab worker", lambda: tunelab_run(tunelab_settings)),
                      ("plain TRL", lambda: plain_run(plain_settings))], reps)
    ours, theirs = runs["tunelab worker"], runs["plain TRL"]
    speed_ours = [r.tokens_per_s(WARMUP_STEPS) for r in ours]
    speed_theirs = [r.tokens_per_s(WARMUP_STEPS) for r in theirs]
    headline, trimmed = speed_ratios(ours, theirs, WARMUP_STEPS)
    arms = {"tunelab worker": tunelab_options(ours[0], tunelab_settings), "plain TRL": plain_options(theirs[0])}
    differ = disagreements(arms, ("device", "precision"))
    loss_gap = max(max(abs(a - b) for a, b in zip(x.losses, y.losses, strict=True)) for x, y in zip(ours, theirs))
    same_steps = all(x.steps == y.steps and x.tokens == y.tokens for x, y in zip(ours, theirs))
    return [Result(
        key="overhead", title="1. Trainer overhead",
        measures="tunelab worker tokens/s ÷ plain TRL SFTTrainer + PEFT script tokens/s (same settings, both "
                 "padding-free, one precision)",
        ratio=headline, target=0.97, higher_is_better=True, arms=arms,
        command=f"python bench/overhead.py{' --quick' if quick else ''}",
        details=[
            f"demo tiny Llama, LoRA r16, chat data, batch 4, max 128 tokens, {steps} steps; tokens/s over every step "
            f"{WARMUP_STEPS}-{steps}, {ours[0].tokens[-1] // steps} tokens per step",
            f"tunelab worker: {speed_text(ours, WARMUP_STEPS)}; plain TRL: {speed_text(theirs, WARMUP_STEPS)} "
            f"(ratio of the two medians: {spread(speed_ours).median / spread(speed_theirs).median:.3f}; ratio with "
            f"the slowest 10% of steps dropped: {trimmed.text()})",
            f"largest per-step loss difference between the two: {loss_gap:.2e} (tolerance {LOSS_TOLERANCE:g})",
        ],
        checks={"loss curves equal within 1e-4": loss_gap <= LOSS_TOLERANCE,
                f"both arms on one device at one precision{' (' + '; '.join(differ) + ')' if differ else ''}": not differ,
                "same steps and token counts": same_steps},
    )]


if __name__ == "__main__":
    standalone("overhead", measure, UNMET_NOTES)
