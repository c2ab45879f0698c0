"""`tunelab demo`: the config and summary of the built-in end-to-end fine-tune.

The model and data come from `tunelab.demos.assets` (built offline, cached); the run
goes through the same orchestrator, worker and store as any other run.
"""

from __future__ import annotations

from rich.console import Console

from tunelab.config.run_config import RunConfig
from tunelab.demos.assets import DemoAssets, build_demo_assets, ensure_demo_assets
from tunelab.demos.recipe import demo_config

__all__ = ["DemoAssets", "build_demo_assets", "ensure_demo_assets", "demo_config", "demo_run_config", "print_demo_summary"]


def demo_run_config(steps: int, backend: str, method: str) -> RunConfig:
    """`tunelab demo` (the text spec's `demo_builder`): sft, or an objective's demo on the same model."""
    if method == "grpo":
        from tunelab.demos.grpo import grpo_demo_config

        return grpo_demo_config(ensure_demo_assets(), steps)
    if method != "sft":
        from tunelab.demos.preference import preference_demo_config

        return preference_demo_config(ensure_demo_assets(), method, steps)
    # 5% held out and measured at the end, so `tunelab eval` has an eval split to compare base and fine-tune on.
    held_out = {"eval_steps": steps, "eval_holdout": 0.05} if backend == "torch" else {}
    return demo_config(ensure_demo_assets(), backend=backend, steps=steps, **held_out)


def print_demo_summary(outcome, console: Console, extra_lines: list[str] = ()) -> None:
    run = outcome.run
    first = f"{outcome.first_loss:.3f}" if outcome.first_loss is not None else "?"
    last = f"{outcome.last_loss:.3f}" if outcome.last_loss is not None else "?"
    console.rule("demo summary")
    console.print(f"run:        {outcome.run_id} ({run.get('status')})")
    console.print(f"steps:      {run.get('final_step') or 0} of {run.get('total_steps') or '?'}")
    console.print(f"loss:       {first} -> {last}")
    for line in extra_lines:  # what a method reports beyond the loss (a preference run's rewards)
        console.print(line)
    duration = run.get("duration_seconds")
    console.print(f"time:       {duration:.1f} s" if duration is not None else "time:       ?")
    console.print(f"output:     {run.get('output_dir') or '(none)'}")
    if run.get("error_message"):
        console.print(f"[red]error:      {run['error_message']}[/]")
