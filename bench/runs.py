"""Running one training job for a benchmark and recording its steps.

`tunelab_run` starts the real tunelab worker (`tunelab.worker.entry:run_worker`) the way
the orchestrator does — a fresh `spawn` child through `tunelab.orchestrator.child` — and
reads its events; `plain_run` starts `plain_trl.py` in a fresh interpreter and reads its
`BENCH {json}` `BENCH {json}` lines. Both give a `StepLog`: per step the worker's own clock, loss and tokens seen, so
throughput is measured inside each process over the same steady-state window.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tunelab.config.run_config import parse_config
from tunelab.orchestrator.child import DEFAULT_WORKER, end_process, spawn_worker

BENCH = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 600
LINE_PREFIX = "BENCH "
# Share of the slowest steps left out of the trimmed throughput figure that stands beside
# every headline (see StepLog.tokens_per_s); headlines count every step.
TRIM = 0.1
TRIMMED_LABEL = f"slowest {TRIM:.0%} of steps dropped"


@dataclass
class StepLog:
    launched: float  # time.time() just before the process was started
    steps: list[int] = field(default_factory=list)
    ts: list[float] = field(default_factory=list)
    losses: list[float | None] = field(default_factory=list)
    tokens: list[int | None] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, step: int, ts: float, loss: Any, tokens: Any) -> None:
        self.steps.append(step)
        self.ts.append(ts)
        self.losses.append(loss)
        self.tokens.append(tokens)

    def tokens_per_s(self, skip: int, trim: float = 0.0) -> float:
        """Tokens per second over every step after step `skip` (the headline), or without the
        slowest `trim` share of steps (the figure labelled beside it: on a shared machine
        those are the steps another process interrupted)."""
        i = self.steps.index(skip)
        per_step = [(self.ts[j + 1] - self.ts[j], self.tokens[j + 1] - self.tokens[j]) for j in range(i, len(self.ts) - 1)]
        kept = sorted(per_step)[: max(1, round(len(per_step) * (1 - trim)))]
        return sum(tokens for _, tokens in kept) / sum(seconds for seconds, _ in kept)

    def step_seconds(self, skip: int) -> list[float]:
        i = self.steps.index(skip)
        return [b - a for a, b in zip(self.ts[i:], self.ts[i + 1:])]

    @property
    def first_step_after_launch(self) -> float:
        return self.ts[0] - self.launched

    @property
    def first_step_after_imports(self) -> float:
        """From the script's imports done (a notebook whose import cell already ran) to its first step."""
        return self.ts[0] - self.facts["imported_ts"]


def speed_ratios(ours: list[StepLog], theirs: list[StepLog], skip: int) -> tuple[Any, Any]:
    """Per-repetition tokens/s ratios of two arms: every step after `skip` (the headline),
    and the same with the slowest TRIM share of steps dropped (shown beside it, labelled)."""
    from sidebyside import ratios

    return (ratios([r.tokens_per_s(skip) for r in ours], [r.tokens_per_s(skip) for r in theirs]),
            ratios([r.tokens_per_s(skip, TRIM) for r in ours], [r.tokens_per_s(skip, TRIM) for r in theirs]))


def speed_text(logs: list[StepLog], skip: int, digits: int = 0) -> str:
    """'M (L–H, n=N) tokens/s; slowest 10% of steps dropped: M'' for one arm's runs."""
    from sidebyside import spread

    return (f"{spread([r.tokens_per_s(skip) for r in logs]).text(digits)} tokens/s; {TRIMMED_LABEL}: "
            f"{spread([r.tokens_per_s(skip, TRIM) for r in logs]).text(digits)}")


# What a plain TRL run reports of its options (plain_trl.py's "args" event).
PLAIN_OPTIONS = ("device", "bf16", "gradient_checkpointing", "padding_free", "packing", "sampling", "dataset_num_proc",
                 "optim", "batch_size", "gradient_accumulation_steps", "max_length", "token_count")


def plain_options(log: StepLog) -> dict[str, Any]:
    """A plain TRL run's options in force, as its script printed them."""
    options = {key: log.facts.get(key) for key in PLAIN_OPTIONS}
    options["device"] = str(options["device"] or "?").split(":")[0].upper()  # "cuda:0" -> "CUDA", as tunelab says it
    options["precision"] = "bf16" if options["bf16"] else "fp32"
    return {"tool": "plain TRL SFTTrainer + PEFT", **options}


def tunelab_options(log: StepLog, settings: dict[str, Any]) -> dict[str, Any]:
    """A tunelab run's options in force: its worker's setup line (device, precision, attention,
    packing) and the settings it was given."""
    device, precision = setup_of(log)
    setup = next((m for m in log.facts.get("statuses", []) if m.startswith("Setting up")), "?")
    return {"tool": "tunelab worker", "device": device, "precision": precision, "setup": setup,
            "packing": bool(settings.get("packing")), "batch_size": settings.get("batch_size"),
            "gradient_accumulation_steps": settings.get("gradient_accumulation_steps"),
            "max_length": settings.get("max_seq_length")}


def disagreements(arms: dict[str, dict[str, Any]], keys: tuple[str, ...]) -> list[str]:
    """The `keys` on which the arms' options differ ('precision: a=bf16, b=fp32'); [] when they agree."""
    out = []
    for key in keys:
        values = {name: options.get(key) for name, options in arms.items()}
        if len({json.dumps(v, default=str) for v in values.values()}) > 1:
            out.append(f"{key}: " + ", ".join(f"{name}={value}" for name, value in values.items()))
    return out


def setup_of(log: StepLog) -> tuple[str, str]:
    """(device, precision) a tunelab run reported in its setup message, e.g. ("CPU", "bf16")."""
    import re

    for message in log.facts.get("statuses", []):
        found = re.search(r"\bon (CPU|CUDA) in (\w+)", message)
        if message.startswith("Setting up") and found:
            return found.group(1), found.group(2)
    return "?", "?"


def tunelab_precision(settings: dict[str, Any]) -> str:
    """The precision tunelab's worker picks for these RunConfig settings on this machine
    ("fp32", "bf16", ...): its device rule, then its CPU rule for the model's width."""
    from types import SimpleNamespace

    from transformers import AutoConfig

    from tunelab.worker.model_setup import device_settings, settle_cpu_precision
    from tunelab.worker.run_config import worker_config

    config = worker_config(parse_config(settings).worker_payload())  # typed, as the worker's entry makes it
    model = SimpleNamespace(config=AutoConfig.from_pretrained(settings["model_name"]))
    return settle_cpu_precision(config, device_settings(config), model).precision


def scratch_dir(prefix: str) -> str:
    (BENCH / "out" / "runs").mkdir(parents=True, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=BENCH / "out" / "runs")


def tunelab_run(settings: dict[str, Any], env: dict[str, str] | None = None, timeout_s: float = RUN_TIMEOUT_S) -> StepLog:
    """One run of the real worker in a spawn child; `settings` are RunConfig fields, `env`
    the child's extra environment (e.g. CUDA_VISIBLE_DEVICES to pin it to one GPU); a run
    not done within `timeout_s` is ended and raises."""
    cfg = parse_config(settings)
    payload = {**cfg.worker_payload(), "output_dir": scratch_dir("tunelab-"), "resume_from": None}
    log = StepLog(launched=time.time())
    worker = spawn_worker(multiprocessing.get_context("spawn"), DEFAULT_WORKER, payload, env or {}, name="bench-worker")
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                event = worker.events.get(timeout=1.0)
            except queue.Empty:
                if not worker.alive():
                    raise RuntimeError("the tunelab worker died without a final event")
                continue
            if event["type"] == "progress" and event.get("peak_memory_gb") is not None:
                log.facts["peak_memory_gb"] = max(log.facts.get("peak_memory_gb", 0.0), event["peak_memory_gb"])
            if event["type"] == "progress" and event.get("loss") is not None:
                log.add(event["step"], event["ts"], event["loss"], event["num_tokens"])
            elif event["type"] == "status":
                log.facts.setdefault("statuses", []).append(event["message"])
                log.facts.setdefault("status_ts", []).append((time.time(), event["message"]))
                for fact in ("memory_before_training_gb", "peak_before_training_gb"):
                    if event.get(fact) is not None:
                        log.facts[fact] = event[fact]
            elif event["type"] == "error":
                raise RuntimeError(f"tunelab run failed: {event['error']}")
            elif event["type"] == "complete":
                log.facts["output_dir"] = event["output_dir"]
                log.facts["complete_ts"] = time.time()
                return log
        raise RuntimeError(f"the tunelab run did not finish within {timeout_s:.0f} s")
    finally:
        worker.process.join(10)
        end_process(worker.process)
        worker.release()


def plain_run(settings: dict[str, Any], stop_after_first_step: bool = False, env: dict[str, str] | None = None,
              timeout_s: float = RUN_TIMEOUT_S) -> StepLog:
    """One run of plain_trl.py in a fresh interpreter (`env`: extra environment, e.g.
    CUDA_VISIBLE_DEVICES); a run not done within `timeout_s` is killed and raises."""
    import threading

    settings = {"output_dir": scratch_dir("plain-"), **settings}
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    stderr_path = Path(settings["output_dir"]) / "stderr.txt"
    log = StepLog(launched=time.time())
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen([sys.executable, str(BENCH / "plain_trl.py"), json.dumps(settings)],
                                   stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    timer = threading.Timer(timeout_s, process.kill)  # the read below blocks: the limit must act from outside
    timer.start()
    try:
        for line in process.stdout:
            if not line.startswith(LINE_PREFIX):
                continue  # the Trainer's own prints
            record = json.loads(line[len(LINE_PREFIX):])
            if record["event"] == "step":
                log.add(record["step"], record["ts"], record["loss"], record["num_tokens"])
                if record.get("peak_memory_gb") is not None:
                    log.facts["peak_memory_gb"] = max(log.facts.get("peak_memory_gb", 0.0), record["peak_memory_gb"])
                if record.get("peak_rss_gb") is not None:
                    log.facts["peak_rss_gb"] = max(log.facts.get("peak_rss_gb", 0.0), record["peak_rss_gb"])
                if stop_after_first_step:
                    break
            elif record["event"] == "args":
                log.facts.update(record)
            elif record["event"] == "imported":
                log.facts["imported_ts"] = record["ts"]
            elif record["event"] == "placed":
                log.facts["model_device"] = record["device"]
                for fact in ("memory_before_training_gb", "peak_before_training_gb"):
                    if record.get(fact) is not None:
                        log.facts[fact] = record[fact]
        else:
            if process.wait(timeout_s) != 0:
                if not timer.is_alive():
                    raise RuntimeError(f"the plain TRL run did not finish within {timeout_s:.0f} s")
                raise RuntimeError(f"plain TRL run failed: {stderr_path.read_text()[-2000:]}")
        return log
    finally:
        timer.cancel()
        if process.poll() is None:
            process.kill()
        process.wait()
