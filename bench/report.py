"""docs/PERFORMANCE.md, written from the results of one `bench/run_all.py` run.

Everything it says about the machine is read when it runs (CPU, its bf16 support, RAM,
GPUs, package versions), and the GPU section reports what `bench/gpu.py` measured in the
same run, or says that it did not run and why; nothing about a machine is written in
by hand.
"""

from __future__ import annotations

import json
import os
import platform
import time
from importlib import metadata
from pathlib import Path

import psutil

from results import Result

PACKAGES = ("torch", "transformers", "peft", "trl", "datasets", "fastapi", "uvicorn", "sse-starlette")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return (f"{os.cpu_count()} CPU cores ({cpu}; {cpu_bf16()}), {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
            f"{gpus()}, Python {platform.python_version()}; {', '.join(versions)}; {second_tool()}")


def second_tool() -> str:
    """The versions in LLaMA-Factory's own venv (bench/whole_run.py's second tool), read there."""
    import subprocess

    from whole_run import LF_VENV, SETUP

    python = LF_VENV / "bin" / "python"
    names = ("llamafactory", "torch", "transformers", "peft", "trl", "datasets")
    code = "from importlib.metadata import version as v; print(', '.join(n + ' ' + v(n) for n in %r))" % (names,)
    try:
        done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return f"second tool: no LLaMA-Factory venv at {LF_VENV} (`bash {SETUP}`)"
    if done.returncode != 0:
        return f"second tool: the LLaMA-Factory venv at {LF_VENV} does not answer (`FORCE=1 bash {SETUP}`)"
    return f"second tool (own venv): {done.stdout.strip()}"


def cpu_bf16() -> str:
    try:
        from tunelab.worker.model_setup import native_cpu_bf16
    except ImportError:
        return "bf16 support unknown"
    return "native bf16 matmul" if native_cpu_bf16() else "no native bf16 matmul"


def gpus() -> str:
    """The GPUs torch sees right now, by name and memory; "no GPU" where it sees none."""
    try:
        import torch
    except ImportError:
        return "GPUs unknown (torch missing)"
    if not torch.cuda.is_available():
        return "no GPU visible to torch"
    names = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        names.append(f"{props.name} ({props.total_memory / 2**30:.0f} GiB)")
    return f"{len(names)} GPU(s): {', '.join(names)}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def write(path: Path, results: list[Result], *, command: str, seconds: float, load_before: tuple[float, ...],
          load_after: tuple[float, ...], gpu: dict | None = None, gpu_note: str = "") -> None:
    """`gpu`: what `bench/gpu.py --json` wrote in this run (None when it did not run, `gpu_note` says why)."""
    met = sum(r.met for r in results)
    unmeasured = [r for r in results if r.not_measured]
    measured_note = f" ({len(unmeasured)} not measured: {', '.join(r.title for r in unmeasured)})" if unmeasured else ""
    lines = [
        "# Performance",
        "",
        f"Measured by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} in {seconds / 60:.1f} minutes. "
        "This file is generated; run the command again to refresh it.",
        "",
        f"Machine: {machine()}. Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in load_after)} — other work on the machine shows up as spread.",
        "",
        "Every ratio is measured side by side in one run: the arms alternate (A B, B A, ...), each repetition "
        "gives one ratio, and the table shows the median with the lowest and highest in brackets. Throughput "
        "headlines count every step after the warm-up; beside them, labelled \"slowest 10% of steps dropped\", "
        "the same without the steps another process most likely interrupted. Each comparison lists every arm's "
        "options as the arm reported them, and checks that arms meant to match (precision, tokens, steps) did.",
        "",
        f"**{met} of {len(results)} targets met{measured_note}.**",
        "",
        "| target | measured (median, spread) | goal | met |",
        "| --- | --- | --- | --- |",
    ]
    for r in results:
        if r.not_measured:
            lines.append(f"| {_cell(r.title)} | not measured | {r.target_text} | not measured |")
        else:
            lines.append(f"| {_cell(r.title)} | {r.ratio.text()} | {r.target_text} | {'yes' if r.met else '**no**'} |")
    for r in results:
        if r.not_measured:
            lines += ["", f"## {r.title}", "", f"*Ratio:* {r.measures}.", "",
                      f"*Not measured in this run:* {r.not_measured}.", "", f"Reproduce: `{r.command}`"]
            continue
        lines += ["", f"## {r.title}", "", f"*Ratio:* {r.measures}.", "",
                  f"*Measured:* {r.ratio.text()} against a goal of {r.target_text} — **{'met' if r.met else 'not met'}**.",
                  ""]
        lines += [f"- {detail}" for detail in r.details]
        lines += [f"- arm {_cell(name)}: " + ", ".join(f"{key}={value}" for key, value in options.items() if key != "tool")
                  + f" ({options.get('tool', '?')})" for name, options in r.arms.items()]
        lines += [f"- check: {name} — {'yes' if ok else '**no**'}" for name, ok in r.checks.items()]
        lines += ["", f"Reproduce: `{r.command}`"]
        if not r.met:
            lines += ["", f"*What stands in the way:* {r.obstacle or 'see the details above.'}"]
    lines += gpu_section(gpu, gpu_note)
    lines += GPU_CHECK_SECTION
    path.write_text("\n".join(lines))


def gpu_section(gpu: dict | None, note: str) -> list[str]:
    lines = ["", "## GPU", "",
             "`python bench/gpu.py` measures tokens/s and MFU of LoRA on a random-init ~1B Llama, tunelab's worker "
             "against plain TRL (each arm pinned to one GPU), padded and packed, with the same steps, tokens and "
             "losses checked between the arms, peak torch.cuda.max_memory_allocated per arm, and the memory "
             "estimate of the packed run against its measured peak.", "",
             "Its headline tokens/s and MFU count every step after the warm-up, as the CPU tables do; beside them, "
             "labelled \"slowest 10% of steps dropped\", the trimmed figure. "
             "What runs on CUDA there: the real worker in bf16, with the gradient checkpointing `tunelab train` "
             "would pick for the run on that GPU (off where the memory estimate fits without it; the same setting "
             "is given to the TRL arm, and the table names it and why); packed runs attend per example with "
             "FlashAttention-2's variable-length kernel where flash-attn is installed on an Ampere or newer GPU, "
             "else PyTorch's flex attention with a block mask (the table's \"tunelab setup\" row is the worker's "
             "own setup line, naming the kernel the run got); TRL's fused LM head as TRL runs it on CUDA (tunelab's "
             "CPU head is off there). On a machine with several GPUs it adds DDP scaling efficiency.", ""]
    if gpu is None:
        return lines + [f"Not measured in this run: {note or 'bench/gpu.py did not run'}.", ""]
    lines += [f"Measured on {gpu.get('device', '?')}; peak FLOP/s: {gpu.get('peak', '?')}; "
              f"N = {gpu.get('n_params', 0) / 1e9:.3f}B matmul weights.", "",
              "| figure | value |", "| --- | --- |"]
    for name, row in gpu.get("figures", {}).items():
        lines.append(f"| {_cell(name)} | {_cell(json.dumps(row, ensure_ascii=False))} |")
    for name, ok in gpu.get("checks", {}).items():
        lines.append(f"- check: {name} — {'yes' if ok else '**no**'}")
    return lines + [""]


# How to run bench/gpu_check.py (it is not part of run_all.py; its figures are in the JSON it writes).
GPU_CHECK_SECTION = [
    '## GPU check',
    '',
    '`python bench/gpu_check.py` proves the CUDA path in one command on one GPU, offline, in under 8 minutes: LoRA, QLoRA (4-bit), DoRA and packed runs of a locally built random-init ~0.5B Llama through the real orchestrator and worker, a stop-and-save followed by a resume, and a merged export; per item it prints pass/fail, tokens/s, MFU and peak CUDA memory (allocated / reserved), and `--json FILE` keeps them; `run_all.py` does not run it, so its figures are not in this file. `python bench/gpu_check.py --dry-run` runs a reduced plan on the CPU with the demo model (QLoRA: "skipped: needs CUDA"; DoRA and packed are left to the LoRA item\'s code and tests/worker) and is part of `make test` (tests/test_gpu_check.py), which also runs the check\'s CUDA branch on the CPU with a stand-in device up to the first training run (the model build and device facts from the child, the peak FLOP/s lookup, N, and the tokens/s and MFU arithmetic), so a broken call there fails the suite.',
    '',
    "What each item proves when it passes on a GPU (each: every step done, a finite final loss, through the real orchestrator and worker, with no CUDA context in the check's own process — CUDA is probed and the model built in children):",
    '',
    '| item | proves |',
    '|---|---|',
    "| lora | the CUDA path itself: the precision picked from the compute capability (bf16 from Ampere on), the attention kernel (named in the worker's setup line), progress events with tokens, and the figures: tokens/s, MFU against the device's peak, peak CUDA memory allocated / reserved |",
    '| qlora | bitsandbytes 4-bit loading and training on CUDA (the one item the dry run cannot run at all) |',
    "| dora | PEFT's DoRA on CUDA |",
    "| packed | packing with per-example attention on CUDA (FlashAttention-2's variable-length kernel where flash-attn is installed, else flex attention) |",
    '| stop-and-save, resume | a stop lands at a step boundary with a valid checkpoint of that step; the resume starts at the next step and completes |',
    '| export merged | the LoRA run merges into 16-bit weights with a config (what serving and GGUF start from) |',
    '',
    'It proves nothing about several GPUs, MIG slices or several machines (docs/CLUSTERS.md).',
    '',
    'To install on a GPU machine that reaches no package index, carry wheels from one that does (same Python 3.11 and CPU architecture; on another platform add `--platform manylinux_2_28_x86_64 --python-version 3.11 --only-binary=:all:` to `pip download`):',
    '',
    '```bash',
    '# on the connected machine, in the repository',
    'pip download -d wheels pip "setuptools>=68"',
    'pip wheel -w wheels "torch==2.13.0" ".[train,dev]" --extra-index-url https://download.pytorch.org/whl/cu128',
    '# copy the repository and wheels/ to the GPU machine, then there:',
    'python3.11 -m venv .venv',
    'PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/wheels .venv/bin/pip install "torch==2.13.0"',
    'PIP_NO_INDEX=1 PIP_FIND_LINKS=$PWD/wheels .venv/bin/pip install -e ".[train,dev]"',
    '.venv/bin/python bench/gpu_check.py --json gpu-check.json',
    '```',
    '',
    "(`make install` also calls apt-get for the browser tests' Chromium, which needs a network when run as root; the pip commands above are all the GPU check needs.)",
    '',
]
