"""A scripted worker for sweep tests: a real spawn child that trains nothing and reports an
eval_loss that depends on its learning rate and LoRA rank, so a sweep has something to
find (best near learning_rate 1e-4 and a high rank) and a pruner something to prune.

It honours stop-and-save like the real worker (a checkpoint, then `complete`), and
SCRIPTED_STEP_SECONDS slows each step where a test must act mid-trial.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "orchestrator"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint_factory import make_checkpoint  # noqa: E402
from scripted_workers import _StopReader, _flush_and_exit, _progress, _step_seconds  # noqa: E402

from tunelab import events as ev  # noqa: E402


def eval_loss_for(config: dict, step: int) -> float:
    """Lower is better: distance of log10(lr) from -4, plus 1/rank, shrinking with steps."""
    return abs(math.log10(config["learning_rate"]) + 4) + 8 / config["lora_r"] + 1 / step


def evaluating_trainer(config, events, stops) -> None:
    stop = _StopReader(stops)
    output_dir = Path(config["output_dir"])
    output_dir.mkdir(parents=True, exist_ok=True)
    events.put(ev.make(ev.OUTPUT_DIR, output_dir=str(output_dir)))
    total = config["max_steps"]
    for step in range(1, total + 1):
        time.sleep(_step_seconds())
        events.put(_progress(step, total, eval_loss=eval_loss_for(config, step)))
        if stop.state == "cancel":
            events.put(ev.complete(None, "cancelled"))
            _flush_and_exit(events)
        if stop.state == "save":
            make_checkpoint(output_dir, step)
            events.put(ev.complete(str(output_dir), f"stopped at step {step}", output_dir / f"checkpoint-{step}"))
            _flush_and_exit(events)
    (output_dir / "adapter_config.json").write_text("{}")
    events.put(ev.complete(str(output_dir), "training completed"))
    _flush_and_exit(events)
