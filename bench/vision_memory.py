"""Vision data memory: a dataset of 10,000 images must not hold its decoded pixels at once.

Two LoRA runs of the tiny vision-language model (`tunelab.demos.vision`) through the
orchestrator and the real worker, the same in all but the dataset: a caption table of
100 images, and one of 10,000 (256x256 PNGs of coloured shapes, 192 KiB each decoded,
1.9 GiB for all). The worker's peak resident memory (its `peak_memory_gb` progress field)
is compared: images are checked before training without being decoded and decoded one
batch at a time, so the 10,000-image run should peak where the 100-image run does.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from pathlib import Path

from assets import CACHE
from results import Result, standalone
from sidebyside import spread

SIDE = 256
SIZES = (100, 10_000)
TARGET = 1.1  # the big run's peak at most 10% above the small run's


def image_table(n: int) -> Path:
    """A caption table of n images, generated once and cached."""
    from tunelab.demos.vision import SHAPE_COLOURS, SHAPES, caption_of, draw_shape

    folder = CACHE / f"vision-{n}-{SIDE}"
    table = folder / "captions.jsonl"
    if table.is_file():
        return table
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = random.Random(n)
    rows = []
    for i in range(n):
        colour, shape = rng.choice(list(SHAPE_COLOURS)), rng.choice(SHAPES)
        name = f"images/{i:05d}.png"
        draw_shape(colour, shape, rng, SIDE).save(folder / name)
        rows.append({"image": name, "text": caption_of(colour, shape)})
    partial = table.with_suffix(".partial")
    partial.write_text("".join(json.dumps(r) + "\n" for r in rows))
    partial.rename(table)
    return table


def run_peak(table: Path, steps: int) -> tuple[float, float]:
    """(worker peak RSS in GiB, seconds from start to finish) of one run on `table`."""
    from tunelab import paths
    from tunelab.orchestrator import Orchestrator
    from tunelab.store import Store
    from tunelab.demos.vision import ensure_vision_demo_assets, vision_demo_config

    assets = ensure_vision_demo_assets(CACHE / "vision-demo")
    with tempfile.TemporaryDirectory(prefix="tunelab-bench-") as home:
        os.environ["TUNELAB_HOME"] = home
        with Store(paths.db_path()) as store:
            orchestrator = Orchestrator(store)
            peaks: list[float] = []
            orchestrator.subscribe(lambda e: peaks.append(e["peak_memory_gb"]) if e["type"] == "progress" and e.get("peak_memory_gb") else None)
            started = time.monotonic()
            try:
                run_id = orchestrator.start(vision_demo_config(assets, steps=steps, data=table, save_steps=0))
                assert orchestrator.wait_idle(1800), "the run did not finish"
                row = store.get_run(run_id)
                assert row["status"] == "completed", row["error_message"]
            finally:
                orchestrator.shutdown()
            return max(peaks), time.monotonic() - started


def measure(quick: bool) -> list[Result]:
    steps = 10 if quick else 30
    reps = 1 if quick else 2
    tables = {n: image_table(n) for n in SIZES}
    small, big, seconds = [], [], []
    for _ in range(reps):  # alternated, so drift on a shared machine hits both
        small.append(run_peak(tables[SIZES[0]], steps)[0])
        peak, took = run_peak(tables[SIZES[1]], steps)
        big.append(peak)
        seconds.append(took)
    decoded_gib = SIZES[1] * SIDE * SIDE * 3 / 2**30
    command = f"python bench/vision_memory.py{' --quick' if quick else ''}"
    return [Result(
        key="vision_memory", title="12. Vision data memory",
        measures=f"worker peak RSS with {SIZES[1]:,} images ÷ with {SIZES[0]} images",
        ratio=spread([b / s for b, s in zip(big, small)]), target=TARGET, higher_is_better=False, command=command,
        details=[f"peak RSS {spread(small).text(3)} GiB ({SIZES[0]} images) vs {spread(big).text(3)} GiB ({SIZES[1]:,} images); "
                 f"all {SIZES[1]:,} decoded would be {decoded_gib:.2f} GiB",
                 f"{steps} steps at batch 4; the {SIZES[1]:,}-image run took {spread(seconds).text(1)} s from start to finish "
                 "(every image's header is checked before training)"],
    )]


if __name__ == "__main__":
    standalone("vision_memory", measure)
