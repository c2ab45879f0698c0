"""docs/PERFORMANCE.md, written from the results of one `bench/run_all.py` run."""

from __future__ import annotations

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
    return (f"{os.cpu_count()} CPU cores ({cpu}), {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, no GPU, "
            f"Python {platform.python_version()}; {', '.join(versions)}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def write(path: Path, results: list[Result], *, command: str, seconds: float, load_before: tuple[float, ...],
          load_after: tuple[float, ...]) -> None:
    met = sum(r.met for r in results)
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
        "leaves out the slowest 10% of steps of every run (the ones another process interrupted); a cost of "
        "tunelab's own is paid on every step and stays in.",
        "",
        f"**{met} of {len(results)} targets met.**",
        "",
        "| target | measured (median, spread) | goal | met |",
        "| --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(f"| {_cell(r.title)} | {r.ratio.text()} | {r.target_text} | {'yes' if r.met else '**no**'} |")
    for r in results:
        lines += ["", f"## {r.title}", "", f"*Ratio:* {r.measures}.", "",
                  f"*Measured:* {r.ratio.text()} against a goal of {r.target_text} — **{'met' if r.met else 'not met'}**.",
                  ""]
        lines += [f"- {detail}" for detail in r.details]
        lines += [f"- check: {name} — {'yes' if ok else '**no**'}" for name, ok in r.checks.items()]
        lines += ["", f"Reproduce: `{r.command}`"]
        if not r.met:
            lines += ["", f"*What stands in the way:* {r.obstacle or 'see the details above.'}"]
    lines += ["", "## GPU", "",
              "`python bench/gpu.py` measures tokens/s and MFU of LoRA on a random-init ~1B Llama, tunelab's "
              "worker against plain TRL, with and without packing (MFU counts 4·N FLOPs per token for LoRA, "
              "6·N for full fine-tuning). It needs a CUDA GPU and none was available where this file was "
              "written, so it has no figures here yet; without CUDA it stops with a message saying so.", ""]
    path.write_text("\n".join(lines))
