"""GPU check: one command that proves tunelab's CUDA path end to end, offline.

    python bench/gpu_check.py [--steps 30] [--peak-tflops 989] [--json out.json]
    python bench/gpu_check.py --dry-run        # CPU, tiny demo model, reduced plan

On one CUDA GPU, within 8 minutes and with nothing downloaded, it trains a locally built
random-init Llama of ~0.5B parameters (hidden 1,536, 16 layers, 12 heads / 4 key-value
heads, MLP 4,096, vocab 32,000) through the real orchestrator and worker, one item after
another: LoRA, QLoRA (4-bit), DoRA, a packed LoRA run, a stop-and-save followed by a
resume, and a merged export of the LoRA run. Per item it prints pass/fail with the
reason, tokens/s, MFU and the run's peak CUDA memory (allocated / reserved); it exits 0
only when every item that ran passed.

`--dry-run` runs the same code on the CPU with the demo's tiny Llama and a few steps per
item, skipping what needs CUDA ("skipped: needs CUDA") and, to stay near a minute on two
cores, the DoRA and packed items (same code as the LoRA item; tests/worker covers both on
CPU); its figures mean nothing, it checks the script and the path. tests/test_gpu_check.py
runs it, and runs the CUDA branch too, on the CPU with a stand-in device, up to the first
training item (where a real GPU is needed).

This process never opens a CUDA context (the runs' workers are its children and get the
whole GPU): CUDA is probed, and the model built, in child interpreters (bench/gpu.py's
`cuda_visible` and `build_in_child`), and the device's name, memory, SMs and compute
capability come back from the build.

MFU = tokens/s x 4·N / the GPU's peak dense bf16 FLOP/s (LoRA-family runs: forward 2N,
backward through the frozen weights 2N; N = the weights in matrix multiplies), as in
bench/gpu.py, whose model builder and peak table this reuses. Tokens/s count every step
after the first WARMUP_STEPS, none dropped.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

TIME_LIMIT_S = 8 * 60
NO_NEW_ITEM_AFTER_S = 6.5 * 60  # an item takes well under 90 s on an H100-class GPU
RUN_TIMEOUT_S = 240
WARMUP_STEPS = 3
SHAPE_HALF_B = dict(hidden_size=1536, intermediate_size=4096, num_hidden_layers=16, num_attention_heads=12,
                    num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)


@dataclass
class Item:
    name: str
    needs_cuda: bool
    in_dry_run: bool  # the dry run keeps to a minute on two CPU cores
    check: Callable[["Check"], "Outcome"]


@dataclass
class Outcome:
    passed: bool
    detail: str
    figures: dict[str, Any] = field(default_factory=dict)


class RunWatcher:
    """Keeps every event of every run, so an item can read its run's progress."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def setup(self, run_id: int) -> str:
        """The worker's own account of the run: device, precision, attention."""
        return next((e["message"] for e in self.events if e["type"] == "status" and e.get("run_id") == run_id
                     and str(e.get("message", "")).startswith("Setting up")), "")

    def progress(self, run_id: int) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "progress" and e.get("run_id") == run_id and e.get("loss") is not None]

    def wait_for_step(self, run_id: int, step: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: any(e["step"] >= step for e in self.progress(run_id)), timeout)


class Check:
    """The shared setting of one check: a private tunelab home, its orchestrator, the model."""

    def __init__(self, args: argparse.Namespace, home: Path, cuda: bool):
        os.environ["TUNELAB_HOME"] = str(home)
        from tunelab import paths
        from tunelab.orchestrator import Orchestrator
        from tunelab.store import Store

        self.cuda, self.steps = cuda, args.steps
        self.store = Store(paths.db_path())
        self.orchestrator = Orchestrator(self.store)
        self.watcher = RunWatcher()
        self.orchestrator.subscribe(self.watcher)
        self.model, self.data, facts, self.max_length, self.batch = prepare_model(cuda, home)
        self.n_params: int = facts.get("n", 0)
        self.device = describe_device(facts) if cuda else "CPU (dry run)"
        if cuda:
            from gpu import peak_flops

            self.peak, self.peak_note = peak_flops(args.peak_tflops, facts)
        else:
            self.peak, self.peak_note = None, "CPU: no MFU"
        self.lora_run: int | None = None

    def config(self, **overrides: Any) -> dict[str, Any]:
        return {"model_name": str(self.model), "local_datasets": [str(self.data)], "training_type": "lora",
                "max_steps": self.steps, "batch_size": self.batch, "gradient_accumulation_steps": 1,
                "max_seq_length": self.max_length, "learning_rate": 2e-4, "lora_r": 16, "lora_alpha": 16,
                "warmup_steps": 0, "seed": 3407, "display_name": "gpu check", **overrides}

    def train(self, **overrides: Any) -> tuple[int, dict[str, Any]]:
        run_id = self.orchestrator.start(self.config(**overrides))
        if not self.orchestrator.wait_idle(RUN_TIMEOUT_S):
            self.orchestrator.stop(save=False, expected_run_id=run_id)
            self.orchestrator.wait_idle(60)
        return run_id, self.store.get_run(run_id)

    def figures(self, run_id: int) -> dict[str, Any]:
        steps = self.watcher.progress(run_id)
        out: dict[str, Any] = {}
        if steps:
            last = steps[-1]
            out["peak_allocated_gb"] = last.get("peak_memory_gb")
            out["peak_reserved_gb"] = last.get("peak_memory_reserved_gb")
        timed = [e for e in steps if e.get("num_tokens") is not None and e.get("elapsed_seconds") is not None]
        start = next((i for i, e in enumerate(timed) if e["step"] >= timed[0]["step"] + WARMUP_STEPS), None) if timed else None
        if start is not None and start < len(timed) - 1:
            first, last = timed[start], timed[-1]
            seconds = last["elapsed_seconds"] - first["elapsed_seconds"]
            if seconds > 0:
                out["tokens_per_s"] = (last["num_tokens"] - first["num_tokens"]) / seconds
                if self.peak:
                    out["mfu"] = out["tokens_per_s"] * 4 * self.n_params / self.peak
        return out

    def close(self) -> None:
        self.orchestrator.shutdown()
        self.store.close()


def prepare_model(cuda: bool, home: Path) -> tuple[Path, Path, dict[str, Any], int, int]:
    """(model folder, data file, facts, max length, batch): the ~0.5B Llama on CUDA, built
    in a child whose facts give N and the device; the demo's model on the CPU (no facts)."""
    if cuda:
        from assets import CACHE, larger_assets
        from gpu import build_in_child

        folder = CACHE / "gpu-check-llama-0.5b"
        facts = build_in_child(SHAPE_HALF_B, folder, None, cuda=True)
        return folder, larger_assets().skewed, facts, 1024, 8
    from tunelab.demos.text import ensure_demo_assets

    assets = ensure_demo_assets(home / "demo-assets")
    return assets.model_dir, assets.alpaca, {}, 128, 4


def describe_device(facts: dict[str, Any]) -> str:
    capability = ".".join(map(str, facts.get("capability") or [])) or "?"
    return f"{facts['name']} ({facts['memory_gib']:.0f} GiB, compute capability {capability})"


def finished_ok(row: dict[str, Any], steps: int) -> Outcome | None:
    """A failing Outcome when a run did not complete all its steps with a finite loss."""
    if row["status"] != "completed":
        return Outcome(False, f"run ended {row['status']}: {row.get('error_message')}")
    if row.get("final_step") != steps:
        return Outcome(False, f"run ended at step {row.get('final_step')}, not {steps}")
    if row.get("final_loss") is None or not math.isfinite(row["final_loss"]):
        return Outcome(False, f"final loss {row.get('final_loss')}")
    return None


def training_item(**overrides: Any) -> Callable[[Check], Outcome]:
    def check(c: Check) -> Outcome:
        run_id, row = c.train(**overrides)
        if overrides.get("use_dora") is None and not overrides.get("packing") and overrides.get("training_type", "lora") == "lora":
            c.lora_run = run_id
        failed = finished_ok(row, c.steps)
        figures = c.figures(run_id)
        if failed:
            failed.figures = figures
            return failed
        return Outcome(True, f"{c.steps} steps, final loss {row['final_loss']:.3f} ({c.watcher.setup(run_id)})", figures)
    return check


def stop_and_resume(c: Check) -> Outcome:
    total = max(c.steps, 12 if c.cuda else 8)
    run_id = c.orchestrator.start(c.config(max_steps=total))
    if not c.watcher.wait_for_step(run_id, 3, RUN_TIMEOUT_S):
        c.orchestrator.stop(save=False, expected_run_id=run_id)
        c.orchestrator.wait_idle(60)
        return Outcome(False, "the run never reached step 3")
    c.orchestrator.stop(save=True, expected_run_id=run_id)
    c.orchestrator.wait_idle(RUN_TIMEOUT_S)
    first = c.store.get_run(run_id)
    stopped_at = first.get("final_step") or 0
    if first["status"] != "stopped" or not (Path(first["output_dir"]) / f"checkpoint-{stopped_at}").is_dir():
        return Outcome(False, f"stop-and-save ended {first['status']} ({first.get('error_message')}), no checkpoint-{stopped_at}")
    second = c.orchestrator.resume(run_id)
    c.orchestrator.wait_idle(RUN_TIMEOUT_S)
    row = c.store.get_run(second)
    steps = [m["step"] for m in c.store.get_metrics(second)]
    failed = finished_ok(row, total)
    if failed:
        return failed
    if not steps or steps[0] != stopped_at + 1:
        return Outcome(False, f"resumed at step {steps[:1]}, expected {stopped_at + 1}")
    return Outcome(True, f"stopped and saved at step {stopped_at}, resumed at {steps[0]}, completed {total}")


def export_merged(c: Check) -> Outcome:
    if c.lora_run is None:
        return Outcome(False, "no completed LoRA run to export")
    from tunelab.export.run import export_run

    started = time.monotonic()
    result = export_run(c.store, c.lora_run, "merged")
    names = {Path(f).name for f in result.files}
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        return Outcome(False, f"merged export lacks config.json or weights: {sorted(names)}")
    return Outcome(True, f"merged {result.plan.dtype} into {result.plan.dest} in {time.monotonic() - started:.0f} s")


PLAN = [
    Item("lora", False, True, training_item()),
    Item("qlora", True, False, training_item(training_type="qlora")),
    Item("dora", False, False, training_item(use_dora=True)),
    Item("packed", False, False, training_item(packing=True)),
    Item("stop-and-save, resume", False, True, stop_and_resume),
    Item("export merged", False, True, export_merged),
]


def describe(figures: dict[str, Any]) -> str:
    parts = []
    if figures.get("tokens_per_s") is not None:
        parts.append(f"{figures['tokens_per_s']:,.0f} tokens/s")
    if figures.get("mfu") is not None:
        parts.append(f"MFU {figures['mfu'] * 100:.1f}%")
    if figures.get("peak_allocated_gb") is not None:
        reserved = figures.get("peak_reserved_gb")
        parts.append(f"peak {figures['peak_allocated_gb']:.2f} GB" + (f" / {reserved:.2f} GB reserved" if reserved is not None else " (RSS)"))
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="tunelab's CUDA path, end to end, in one command")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny demo model, reduced plan")
    parser.add_argument("--steps", type=int, help="steps per training item (default 30; 3 with --dry-run)")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's peak dense bf16 TFLOP/s, if not in bench/gpu.py's table")
    parser.add_argument("--home", help="tunelab home for the check's runs (default: a fresh folder under bench/out)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    args.steps = args.steps or (3 if args.dry_run else 30)
    started = time.monotonic()

    from gpu import cuda_visible

    cuda = not args.dry_run and cuda_visible()
    if not cuda and not args.dry_run:
        print("bench/gpu_check.py needs a CUDA GPU and torch sees none; use --dry-run to check it on a CPU", file=sys.stderr)
        return 2
    print(f"tunelab GPU check; torch {importlib.metadata.version('torch')}"
          + ("; building the model in a child…" if cuda else ""), flush=True)
    (BENCH / "out").mkdir(exist_ok=True)
    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="gpu-check-", dir=BENCH / "out"))
    check = Check(args, home, cuda)
    device = check.device
    print(f"on {device}: model {check.model}" + (f" ({check.n_params / 1e9:.2f}B matmul weights)" if cuda else ""),
          f"| {check.peak_note} | {args.steps} steps per item, batch {check.batch}, max length {check.max_length}", flush=True)

    results: list[dict[str, Any]] = []
    try:
        for item in PLAN:
            if item.needs_cuda and not cuda:
                outcome, state = Outcome(True, "skipped: needs CUDA"), "skip"
            elif args.dry_run and not item.in_dry_run:
                outcome, state = Outcome(True, "skipped in the dry run (the lora item runs the same code)"), "skip"
            elif time.monotonic() - started > NO_NEW_ITEM_AFTER_S:
                outcome, state = Outcome(False, "not run: the 8-minute budget was used up"), "FAIL"
            else:
                item_started = time.monotonic()
                try:
                    outcome = item.check(check)
                except Exception as exc:  # noqa: BLE001 - one broken item must not hide the others
                    outcome = Outcome(False, f"{type(exc).__name__}: {exc}")
                outcome.figures["seconds"] = round(time.monotonic() - item_started, 1)
                state = "pass" if outcome.passed else "FAIL"
            results.append({"item": item.name, "result": state, "detail": outcome.detail, **outcome.figures})
            figures = describe(outcome.figures)
            print(f"  {state:<4}  {item.name:<22} {outcome.detail}" + (f" | {figures}" if figures else ""), flush=True)
    finally:
        check.close()
    failed = [r["item"] for r in results if r["result"] == "FAIL"]
    total = time.monotonic() - started
    print(f"{'FAILED: ' + ', '.join(failed) if failed else 'all items passed'} ({total:.0f} s)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "seconds": total, "items": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
