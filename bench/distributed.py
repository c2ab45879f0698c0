"""Distributed runs: 2 ranks against 1 with the same global batch, the per-step cost of
agreeing on a stop, and the time from start to the first step.

All arms are real runs of the demo's tiny Llama through the orchestrator: the 1-rank arm
in the ordinary worker (batch 4), the 2-rank arm under torchrun with gloo (batch 2 per
rank). The stop agreement (one all-reduce of one small tensor per optimizer step, every
rank, every step) is timed in a 2-rank gloo group started by torchrun, calling the very
function the Trainer callback calls, and set against the 2-rank run's own median step.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from assets import demo_assets
from results import Result, standalone
from sidebyside import spread

STEPS = 12
AGREEMENT_CALLS = 2000
LOSS_TOLERANCE = 1e-3

UNMET_NOTES = {
    "distributed_first_step": "Each rank is a fresh interpreter that imports torch, transformers, PEFT and TRL; on "
                              "2 CPU cores two ranks import at once, behind torchrun's own start-up and rendezvous.",
}

AGREEMENT_SCRIPT = """
import json, os, sys, time
import torch.distributed as dist
dist.init_process_group("gloo")
from tunelab.worker.launch import ranks
for _ in range(50):
    ranks.agree_on_stop(None)
samples = []
for _ in range(int(sys.argv[1])):
    started = time.perf_counter()
    ranks.agree_on_stop(None)
    samples.append(time.perf_counter() - started)
if ranks.rank() == 0:
    samples.sort()
    print("AGREEMENT " + json.dumps({"median": samples[len(samples) // 2], "p99": samples[int(len(samples) * 0.99)]}))
dist.destroy_process_group()
"""


def measure(quick: bool) -> list[Result]:
    demo = demo_assets()
    reps = 1 if quick else 2
    home = tempfile.mkdtemp(prefix="bench-home-")
    os.environ["TUNELAB_HOME"] = home
    try:
        pairs = [(one_run(demo, 1), one_run(demo, 2)) for _ in range(reps)]
        agreement = agreement_cost(AGREEMENT_CALLS // (4 if quick else 1))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    gaps = [max(abs(a - b) for a, b in zip(one["losses"], two["losses"])) for one, two in pairs]
    same_steps = all(one["steps"] == two["steps"] == list(range(1, STEPS + 1)) for one, two in pairs)
    same_tokens = all(one["tokens"] == two["tokens"] for one, two in pairs)
    step_s = statistics.median(two["step_s"] for _, two in pairs)
    command = f"python bench/distributed.py{' --quick' if quick else ''}"
    return [
        Result(key="distributed_loss", title="11a. 2 ranks = 1 rank (loss)",
               measures="largest |loss(2 ranks) − loss(1 rank)| over all steps, same global batch",
               ratio=spread(gaps), target=LOSS_TOLERANCE, higher_is_better=False, command=command,
               details=[f"demo tiny Llama, LoRA, {STEPS} steps; 1 rank batch 4 vs 2 gloo ranks batch 2 each (torchrun)",
                        f"final loss 1 rank {pairs[0][0]['losses'][-1]:.5f}, 2 ranks {pairs[0][1]['losses'][-1]:.5f}"],
               checks={"both arms completed": all(o["ok"] and t["ok"] for o, t in pairs),
                       "the same steps were logged": same_steps,
                       "the same tokens were trained (summed over ranks)": same_tokens}),
        Result(key="stop_agreement", title="11b. Stop agreement per step",
               measures="one stop agreement (all-reduce of one int, 2 gloo ranks) ÷ one 2-rank training step",
               ratio=spread([agreement["median"] / step_s]), target=0.02, higher_is_better=False, command=command,
               details=[f"agreement median {agreement['median'] * 1e6:.0f} µs, p99 {agreement['p99'] * 1e6:.0f} µs "
                        f"over {AGREEMENT_CALLS // (4 if quick else 1)} calls; 2-rank step {step_s * 1000:.0f} ms (median)"]),
        Result(key="distributed_first_step", title="11c. First step, 2 ranks",
               measures="start → first progress event, 2 ranks (torchrun) ÷ 1 rank",
               ratio=spread([two["first_step_s"] / one["first_step_s"] for one, two in pairs]), target=2.0,
               higher_is_better=False, command=command,
               details=[f"1 rank {spread([o['first_step_s'] for o, _ in pairs]).text(1)} s; "
                        f"2 ranks {spread([t['first_step_s'] for _, t in pairs]).text(1)} s (no prewarmed worker)"]),
    ]


def one_run(demo, processes: int) -> dict:
    from tunelab import paths
    from tunelab.config.run_config import parse_config
    from tunelab.demos.text import demo_config
    from tunelab.orchestrator import Orchestrator
    from tunelab.store import Store

    data = demo_config(demo, steps=STEPS, save_steps=STEPS).public()
    data.update(batch_size=4 // processes, gradient_accumulation_steps=1, num_processes=processes)
    store = Store(paths.db_path())
    orchestrator = Orchestrator(store)
    stamps: dict[int, float] = {}
    orchestrator.subscribe(lambda e: stamps.setdefault(e["step"], time.time()) if e["type"] == "progress" else None)
    try:
        started = time.time()
        run_id = orchestrator.start(parse_config(data))
        if not orchestrator.wait_idle(600):
            raise RuntimeError("the run did not finish")
        row = store.get_run(run_id)
        metrics = store.get_metrics(run_id)
    finally:
        orchestrator.shutdown()
        store.close()
    steps = sorted(stamps)
    print(f"    {processes} rank(s): {row['status']} in {time.time() - started:.1f} s  #", flush=True)
    return {"ok": row["status"] == "completed", "steps": [m["step"] for m in metrics],
            "losses": [m["loss"] for m in metrics], "tokens": [m["num_tokens"] for m in metrics],
            "first_step_s": stamps[steps[0]] - started,
            "step_s": statistics.median(stamps[b] - stamps[a] for a, b in zip(steps, steps[1:]))}


def agreement_cost(calls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "agree.py"
        script.write_text(AGREEMENT_SCRIPT)
        result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                 str(script), str(calls)], capture_output=True, text=True, timeout=300,
                                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    line = next((l for l in result.stdout.splitlines() if l.startswith("AGREEMENT ")), None)
    if line is None:
        raise RuntimeError(f"the agreement timing failed: {result.stdout[-800:]} {result.stderr[-800:]}")
    return json.loads(line.removeprefix("AGREEMENT "))


if __name__ == "__main__":
    standalone("distributed", measure, UNMET_NOTES)
