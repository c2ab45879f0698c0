"""Target 6 — logging cost: training step time with database logging on ÷ off.

The orchestrator stores every step's metrics in SQLite: the pump buffers the rows and a
thread of its own writes each batch of 10. To compare on and off without the run-to-run
noise of separate runs, one long run switches logging per batch: a store that drops the
rows of "off" batches stands in for logging off, and which batches are "on" is drawn at
random (half of them, seeded), so nothing periodic in the run — epochs, the order of
the data — lines up with either arm. A batch is written while the worker trains the
next 10 steps, so those steps are the ones that pay for it: each step is counted for
the arm of the batch before it. Rows are cut to 16 tokens, so every step does the same
work; step times come from the worker's own timestamps.

What logging on adds is exactly the store's write of a batch, on a parent thread; the worker
is another process, so the most that write can take from training is the CPU time it
uses. The verdict is that bound, measured in the same runs: (median "off" batch + the
mean CPU time of one write, timed on the writing thread) ÷ the median "off" batch, where
a batch's time is the sum of the 10 steps that pay for the write before it. It resolves
the 1% target, which the direct comparison cannot on two shared cores: the median "on"
batch ÷ the median "off" batch of one run scatters by ±2% (0.98 and 1.012 in two runs of
the quick form, the mean step time by 10%). That direct, randomized comparison is
reported beside it (untrimmed mean step times too), and a check fails the benchmark if it
shows a cost the bound misses (over 5%, past its scatter). As a third view, whole runs
with logging entirely on and entirely off alternate, and their total run times (start to
the final event) are compared.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import tempfile
import threading

from assets import demo_assets
from results import Result, standalone
from sidebyside import ratios, spread

BATCH = 10  # the metric buffer's flush size (tunelab.orchestrator.metric_buffer.FLUSH_AT)
WARMUP_BATCHES = 2

UNMET_NOTES = {
    "logging_cost": "The bound is the write's own CPU time over a batch's time: past 1% only if one 10-row SQLite "
                    "write took over 1% of 10 steps (~0.9 ms against ~90 ms here; it took ~0.4 ms inside the runs "
                    "of 2026-12-05). Where it is not met, see the write time in the details: a slow disk, or a "
                    "store on a network file system.",
}


def arm_of_batches(count: int, seed: int) -> list[bool]:
    """True ("on") for a random half of the batches after the warm-up ones."""
    arms = [i % 2 == 0 for i in range(count - WARMUP_BATCHES)]
    random.Random(seed).shuffle(arms)
    return [False] * WARMUP_BATCHES + arms


def measure(quick: bool) -> list[Result]:
    demo = demo_assets()
    reps, steps = (3, 40 * BATCH) if quick else (5, 82 * BATCH)
    whole_steps = 20 * BATCH if quick else 60 * BATCH
    home = tempfile.mkdtemp(prefix="bench-home-")
    os.environ["TUNELAB_HOME"] = home
    try:
        bounds, batch_ratios, mean_ratios, stored_ok, totals = [], [], [], True, {True: [], False: []}
        write_cpu: list[float] = []
        for seed in range(reps):
            run_writes: list[float] = []
            on, off, ok, _ = one_run(demo, steps, arm_of_batches(steps // BATCH, seed), run_writes)
            off_batch = statistics.median(map(sum, off))
            bounds.append((off_batch + statistics.fmean(run_writes)) / off_batch)
            write_cpu += run_writes
            batch_ratios.append(statistics.median(map(sum, on)) / off_batch)
            mean_ratios.append(statistics.fmean(t for b in on for t in b) / statistics.fmean(t for b in off for t in b))
            stored_ok &= ok
            for logging in ((True, False) if seed % 2 == 0 else (False, True)):  # whole runs, alternating
                *_, ok, seconds = one_run(demo, whole_steps, [logging] * (whole_steps // BATCH), [])
                totals[logging].append(seconds)
                stored_ok &= ok
        write_ms = write_cost_ms()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return [Result(
        key="logging_cost", title="6. Database logging cost",
        measures="the most logging can slow training: (median 10-step batch + CPU time of one metric write on "
                 "the parent's writing thread) ÷ median batch, in the same runs",
        ratio=spread(bounds), target=1.01, higher_is_better=False,
        command=f"python bench/logging_cost.py{' --quick' if quick else ''}",
        details=[f"demo tiny Llama, LoRA, batch 4 of 16-token rows, {steps} steps per run, logging on for a random "
                 f"half of its {BATCH}-row metric batches, {reps} run(s)",
                 f"one {BATCH}-row metric write in these runs: {statistics.fmean(write_cpu) * 1000:.2f} ms of CPU "
                 f"time on the writing thread (mean of {len(write_cpu)}); median batch "
                 f"{off_batch * 1000:.1f} ms (last run)",
                 f"direct comparison, random halves of each run's batches: median batch time on ÷ off, per run "
                 f"{spread(batch_ratios).text(4)}; mean step time on ÷ off (every step, untrimmed) "
                 f"{spread(mean_ratios).text(4)}",
                 f"whole runs of {whole_steps} steps, logging all on vs all off (alternating): total run time "
                 f"on ÷ off {ratios(totals[True], totals[False]).text(3)}; on {spread(totals[True]).text(2)} s, "
                 f"off {spread(totals[False]).text(2)} s (includes loading, so noisier than the step times)",
                 f"one {BATCH}-row metric write, alone: {write_ms:.2f} ms of CPU time in the parent"],
        checks={"the rows of 'on' batches, and only those, were stored": stored_ok,
                "the direct comparison shows no cost past its scatter (median ≤ 1.05)":
                    statistics.median(batch_ratios) <= 1.05},
    )]


def write_cost_ms() -> float:
    """CPU time of one metric batch written to the store (what an "on" batch adds)."""
    import time

    from tunelab import paths
    from tunelab.store import Store

    with Store(paths.db_path()) as store:
        run_id = store.create_run({"model_name": "cost probe"}, "cost probe", "none")
        rows = [{"step": step, "loss": 1.0, "learning_rate": 1e-3, "grad_norm": 0.5, "epoch": 0.1, "num_tokens": 64,
                 "elapsed_seconds": 1.0} for step in range(1, 2001)]
        started = time.process_time()
        for first in range(0, 2000, BATCH):
            store.add_metrics(run_id, rows[first:first + BATCH])
        return (time.process_time() - started) / (2000 / BATCH) * 1000


def one_run(demo, steps: int, arms: list[bool],
            write_cpu: list[float]) -> tuple[list[list[float]], list[list[float]], bool, float]:
    """The step times of each "on" and each "off" batch (the steps that paid for its write),
    whether exactly the "on" rows were stored, and the run's total seconds from the start
    call to its final event. Each write's CPU seconds, on the thread that made it, are
    appended to `write_cpu`."""
    import time

    from tunelab import paths
    from tunelab.demos.text import demo_config
    from tunelab.orchestrator import Orchestrator
    from tunelab.store import Store

    def logged(step: int) -> bool:
        return arms[(step - 1) // BATCH]

    class SwitchedStore(Store):
        """Stores the rows of "on" batches only: the database work of logging, switched."""

        def add_metrics(self, run_id, rows):
            kept = [row for row in rows if logged(row["step"])]
            if kept:
                started = time.thread_time()
                super().add_metrics(run_id, kept)
                write_cpu.append(time.thread_time() - started)

    store = SwitchedStore(paths.db_path())
    orchestrator = Orchestrator(store)
    stamps: dict[int, float] = {}
    done = threading.Event()

    def record(event: dict) -> None:
        if event["type"] == "progress" and event.get("loss") is not None:
            stamps[event["step"]] = event["ts"]
        elif event.get("final"):
            done.set()

    orchestrator.subscribe(record)
    try:
        started = time.monotonic()
        run_id = orchestrator.start(demo_config(demo, steps=steps, learning_rate=1e-3, max_seq_length=16))
        if not done.wait(600):
            raise RuntimeError("the logging-cost run did not finish")
        total = time.monotonic() - started
        if not orchestrator.wait_idle(60):
            raise RuntimeError("the logging-cost run did not finish")
        stored = [row["step"] for row in store.get_metrics(run_id)]
    finally:
        orchestrator.shutdown()
        store.close()
    on, off = [], []
    for written in range(WARMUP_BATCHES, steps // BATCH - 1):
        # Batch k is written while the steps of batch k + 1 train: those steps pay for it.
        paying = range((written + 1) * BATCH + 1, (written + 2) * BATCH + 1)
        times = [stamps[s] - stamps[s - 1] for s in paying if s - 1 in stamps and s in stamps]
        if len(times) == BATCH:
            (on if arms[written] else off).append(times)
    return on, off, stored == [s for s in range(1, steps + 1) if logged(s)], total


if __name__ == "__main__":
    standalone("logging_cost", measure, UNMET_NOTES)
