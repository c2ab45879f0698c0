"""Speech data memory: a dataset of thousands of clips must not hold its decoded samples at once.

Two runs of the speech demo's tiny Whisper (`tunelab.demos.speech`) through the
orchestrator and the real worker, the same in all but the dataset: 500 short clips, and
4,000 (number words spoken by espeak-ng, 22.05 kHz wav; a pool of spoken clips is copied
to make up the count, so the table builds in seconds). The worker's peak resident memory
(its `peak_memory_gb` progress field) is compared: every clip is decoded once, one at a
time, to check it before training, and again one batch at a time to train, so the
4,000-clip run should peak where the 500-clip run does.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from assets import CACHE
from results import Result, standalone
from sidebyside import spread

SIZES = (500, 4_000)
POOL = 48  # distinct spoken clips the tables are made of
TARGET = 1.1  # the big run's peak at most 10% above the small run's


def clip_table(n: int) -> tuple[Path, float]:
    """(a transcript table of n spoken clips, their total seconds), generated once and cached."""
    import soundfile

    from tunelab.demos.speech import SYNTH_RATE, speak, spoken_rows, write_clip

    folder = CACHE / f"speech-{n}"
    table = folder / "transcripts.jsonl"
    if not table.is_file():
        pool = folder / "pool"
        pool.mkdir(parents=True, exist_ok=True)
        spoken = spoken_rows(POOL, seed=11)
        for i, (text, voice, speed, pitch) in enumerate(spoken):
            samples, rate = speak(text, voice, speed, pitch)
            write_clip(pool / f"{i:02d}.wav", samples, rate, SYNTH_RATE)
        (folder / "clips").mkdir(exist_ok=True)
        rows = []
        for i in range(n):
            name = f"clips/{i:05d}.wav"
            shutil.copyfile(pool / f"{i % POOL:02d}.wav", folder / name)
            rows.append({"audio": name, "text": spoken[i % POOL][0]})
        partial = table.with_suffix(".partial")
        partial.write_text("".join(json.dumps(r) + "\n" for r in rows))
        partial.rename(table)
    seconds = sum(soundfile.info(folder / "pool" / f"{i % POOL:02d}.wav").duration for i in range(n))
    return table, seconds


def run_peak(table: Path, steps: int) -> tuple[float, float]:
    """(worker peak RSS in GiB, seconds from start to finish) of one run on `table`."""
    from tunelab import paths
    from tunelab.orchestrator import Orchestrator
    from tunelab.demos.speech import ensure_speech_demo_assets, speech_demo_config
    from tunelab.store import Store

    assets = ensure_speech_demo_assets(CACHE / "speech-demo")
    with tempfile.TemporaryDirectory(prefix="tunelab-bench-") as home:
        os.environ["TUNELAB_HOME"] = home
        with Store(paths.db_path()) as store:
            orchestrator = Orchestrator(store)
            peaks: list[float] = []
            orchestrator.subscribe(lambda e: peaks.append(e["peak_memory_gb"]) if e["type"] == "progress" and e.get("peak_memory_gb") else None)
            started = time.monotonic()
            try:
                config = speech_demo_config(assets, steps=steps, data=table, save_steps=0, eval_steps=0, local_eval_datasets=[])
                run_id = orchestrator.start(config)
                assert orchestrator.wait_idle(1800), "the run did not finish"
                row = store.get_run(run_id)
                assert row["status"] == "completed", row["error_message"]
            finally:
                orchestrator.shutdown()
            return max(peaks), time.monotonic() - started


def measure(quick: bool) -> list[Result]:
    steps = 10 if quick else 30
    reps = 1 if quick else 2
    tables = {n: clip_table(n) for n in SIZES}
    small, big, seconds = [], [], []
    for _ in range(reps):  # alternated, so drift on a shared machine hits both
        small.append(run_peak(tables[SIZES[0]][0], steps)[0])
        peak, took = run_peak(tables[SIZES[1]][0], steps)
        big.append(peak)
        seconds.append(took)
    audio_seconds = tables[SIZES[1]][1]
    decoded_gib = audio_seconds * 16000 * 4 / 2**30  # float32 at the extractor's 16 kHz
    command = f"python bench/speech_memory.py{' --quick' if quick else ''}"
    return [Result(
        key="speech_memory", title="14. Speech data memory",
        measures=f"worker peak RSS with {SIZES[1]:,} clips ÷ with {SIZES[0]} clips",
        ratio=spread([b / s for b, s in zip(big, small)]), target=TARGET, higher_is_better=False, command=command,
        details=[f"peak RSS {spread(small).text(3)} GiB ({SIZES[0]} clips) vs {spread(big).text(3)} GiB ({SIZES[1]:,} clips); "
                 f"all {SIZES[1]:,} clips ({audio_seconds / 60:.0f} min of speech) decoded at 16 kHz would be {decoded_gib:.2f} GiB",
                 f"{steps} steps at batch 8; the {SIZES[1]:,}-clip run took {spread(seconds).text(1)} s from start to finish "
                 "(every clip is decoded once to check it before training)"],
    )]


if __name__ == "__main__":
    standalone("speech_memory", measure)
