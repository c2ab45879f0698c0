"""Reliability and security at full size: faults caused for real on live servers, bad input,
and a crowd on the progress stream. Writes docs/RELIABILITY.md (each figure next to the
command that reproduces it) and bench/out/reliability.json.

    .venv/bin/python bench/reliability.py                      # everything, ~15 min on 2 cores
    .venv/bin/python bench/reliability.py --only load fuzz     # some sections; the doc is re-rendered

The scenarios are the reliability suite's own (tests/reliability), run here at full size;
`.venv/bin/python -m pytest tests/reliability` runs a small version of each as tests.
Every server is a real `python -m tunelab.server` on a loopback port with its own home.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

from harness import load_server_harness, worker_env  # noqa: E402  (also makes the test helpers importable)
from reliability_report import render  # noqa: E402  (bench/, next to this script)

from canary import Canary, atime_is_tracked  # noqa: E402
from disk_faults import full_folder, read_only_folder  # noqa: E402
from fault_workers import GARBAGE_COUNT  # noqa: E402
from fuzzing import run_schemathesis, sweep_auth, sweep_keys  # noqa: E402
from kill_trials import STAGES, run_kill_trial  # noqa: E402
from path_attacks import attack_delete, attack_table, plant_escape_links, send_attacks  # noqa: E402
from preemption import (resume_two_steps, sigterm_server_mid_run, sigterm_train, start_train,  # noqa: E402
                        wait_stored_step, write_train_config)
from scenarios import run_to_end, run_with_locked_database  # noqa: E402
from secret_leaks import make_secrets, run_with_secrets, s3_bucket_with, with_secrets  # noqa: E402
from server_kill import kill_server_mid_run  # noqa: E402
from sse_load import run_sse_load  # noqa: E402
from tunelab.demos.text import demo_config, ensure_demo_assets  # noqa: E402

OUT = ROOT / "bench" / "out" / "reliability.json"
DOC = ROOT / "docs" / "RELIABILITY.md"
TOKEN = "reliability-bench-token"
# Watchdog caps for the wedged workers: the defaults (600 s save, 120 s cancel, 15 s grace)
# behave the same, only slower.
SHORT_CAPS = {"TUNELAB_STOP_SAVE_CAP_S": "5", "TUNELAB_STOP_CANCEL_CAP_S": "5", "TUNELAB_STOP_GRACE_S": "5"}


class Lab:
    """Demo assets, live servers (each with its own home under one folder) and run bodies."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.assets = ensure_demo_assets(workdir / "assets")
        self._launch = load_server_harness()._launch
        self._servers: list[Any] = []
        self._base = demo_config(self.assets, steps=12).public()

    def body(self, **overrides: Any) -> dict[str, Any]:
        return {**self._base, **overrides}

    def server(self, name: str, target: str | None = None, log_level: str = "warning", home: Path | None = None,
               cwd: Path | None = None, **env: str) -> Any:
        home = home or self.workdir / name / "home"
        home.mkdir(parents=True, exist_ok=True)
        server = self._launch(home, TOKEN, [self.assets.root], worker_env(target, **env), log_level, cwd=cwd)
        self._servers.append(server)
        return server

    def close(self) -> None:
        for server in self._servers:
            server.stop()


# --- sections: each runs at full size and returns its figures -----------------------------
def worker_kills(lab: Lab, trials: int, seed: int) -> dict[str, Any]:
    server = lab.server("kills")
    rng = random.Random(seed)
    results, failures = [], []
    for i in range(trials):
        stage = STAGES[i % len(STAGES)]
        try:
            results.append(run_kill_trial(server, lab.body, stage, rng))
        except AssertionError as exc:
            failures.append(f"{stage}: {exc}")
    by_stage = {}
    for stage in STAGES:
        mine = [t for t in results if t.stage == stage]
        by_stage[stage] = {
            "trials": len(mine), "landed": dict(Counter(t.landed for t in mine)),
            "statuses": dict(Counter(t.status for t in mine)),
            "max_kill_to_end_s": max((t.kill_to_end_s for t in mine), default=None),
            "partial_checkpoints_left": sum(t.partial_checkpoint_left for t in mine),
            "resumable": sum(t.can_resume for t in mine),
            "moments": [t.moment for t in mine],
        }
    return {
        "trials": trials, "seed": seed, "failed_trials": failures, "by_stage": by_stage,
        "landed": dict(Counter(t.landed for t in results)),
        "terminal": sum(t.status in ("error", "completed", "stopped") for t in results),
        "max_kill_to_end_s": max(t.kill_to_end_s for t in results),
        "median_kill_to_end_s": statistics.median(t.kill_to_end_s for t in results),
        "streamed_steps": sum(len(t.streamed_steps) for t in results),
        "streamed_not_stored": sum(len(t.unstored_streamed_steps) for t in results),
        "leftover_processes": sum(len(t.leftovers) for t in results),
        "resume_matches_checkpoint": sum(t.can_resume == t.has_valid_checkpoint for t in results if t.status == "error"),
        "errors": sum(t.status == "error" for t in results),
    }


def wedged(lab: Lab) -> dict[str, Any]:
    cases = [
        ("hangs while saving; stop and save", "fault_workers:hangs_while_saving", 3, True),
        ("ignores stop and SIGTERM; stop and save", "scripted_workers:ignores_stop", 3, True),
        ("ignores stop and SIGTERM; cancel", "scripted_workers:ignores_stop", 3, False),
        ("hangs after sending complete", "scripted_workers:hangs_after_complete", None, True),
    ]
    figures = {}
    for i, (name, target, stop_at, save) in enumerate(cases):
        server = lab.server(f"wedged-{i}", target, SCRIPTED_STEP_SECONDS="0.05", **SHORT_CAPS)
        ending = run_to_end(server, lab.body(max_steps=5000 if stop_at else 5), stop_at, save)
        row = ending.row
        figures[name] = {"target": target, "status": row["status"], "resume_blocked": row["resume_blocked"],
                         "can_resume": row["can_resume"], "error": row["error_message"],
                         "seconds_to_end": ending.seconds, "worker_gone": ending.worker_gone,
                         "leftovers": len(ending.leftovers)}
    return {"caps": SHORT_CAPS, "cases": figures}


def server_kills(lab: Lab, trials: int) -> dict[str, Any]:
    outcomes = []
    for i in range(trials):
        def start(home: Path) -> Any:
            return lab.server(f"server-kill-{i}", home=home)

        kill = kill_server_mid_run(start, lab.workdir / f"server-kill-{i}" / "home", lab.body, kill_after_step=4 + 3 * i)
        outcomes.append({
            "killed_at_step": kill.killed_at_step, "worker_exit_s": kill.worker_exit_s, "all_exit_s": kill.all_exit_s,
            "status_after_restart": kill.row_after_restart["status"], "message": kill.row_after_restart["error_message"],
            "can_resume": kill.row_after_restart["can_resume"], "checkpoint_step": kill.resume_checkpoint_step,
            "resumed_first_step": kill.resumed_first_step, "stored_steps": len(kill.row_after_restart["metrics"]["steps"]),
        })
    exits = [o["worker_exit_s"] for o in outcomes if o["worker_exit_s"] is not None]
    return {"trials": outcomes, "max_worker_exit_s": max(exits) if exits else None,
            "workers_outliving_server": trials - len(exits)}


def preemption(lab: Lab, trials: int) -> dict[str, Any]:
    """SIGTERM to `tunelab serve` (prewarmed, as it runs by default) and to `tunelab train`
    mid-run; the first server trial is restarted and its run resumed."""
    def figures(p: Any) -> dict[str, Any]:
        return {"step_at_signal": p.step_at_signal, "final_step": p.row["final_step"], "status": p.row["status"],
                "checkpoint_step": p.checkpoint_step, "steps_lost": p.steps_lost, "exit_code": p.exit_code,
                "signal_to_stored_s": p.signal_to_stored_s, "signal_to_exit_s": p.signal_to_exit_s,
                "stored_steps_contiguous": p.stored_steps == list(range(1, (p.row["final_step"] or 0) + 1))}

    servers, clis = [], []
    for i in range(trials):
        home = lab.workdir / f"preempt-serve-{i}" / "home"
        outcome = sigterm_server_mid_run(lab.server(f"preempt-serve-{i}", home=home), lab.body, after_step=4 + 3 * i)
        result = figures(outcome)
        if i == 0:
            resumed = resume_two_steps(lab.server(f"preempt-serve-{i}-again", home=home), outcome.run_id)
            result["resumed_steps"] = resumed
            result["resume_joins_without_gap"] = resumed[0] == (outcome.row["final_step"] or 0) + 1
        servers.append(result)
    for i in range(trials):
        home = lab.workdir / f"preempt-train-{i}" / "home"
        home.mkdir(parents=True)
        process = start_train(home, write_train_config(home.parent / "run.yaml", lab.assets))
        try:
            wait_stored_step(home, 3 + 3 * i)
            clis.append(figures(sigterm_train(process, home)))
        finally:
            if process.poll() is None:
                process.kill()
    every = servers + clis
    return {"serve": servers, "train": clis, "steps_lost": sum(t["steps_lost"] or 0 for t in every),
            "all_stopped": all(t["status"] == "stopped" for t in every),
            "max_signal_to_stored_s": max(t["signal_to_stored_s"] for t in every),
            "max_signal_to_exit_s": max(t["signal_to_exit_s"] for t in every)}


def database_lock(lab: Lab) -> dict[str, Any]:
    figures = {}
    for lock_s in (3.0, 15.0):
        release = lab.workdir / f"release-{lock_s:g}"
        server = lab.server(f"db-lock-{lock_s:g}", "scripted_workers:trainer", SCRIPTED_STEP_SECONDS="0.05",
                            SCRIPTED_RELEASE_FILE=str(release))
        locked = run_with_locked_database(server, lab.body(max_steps=60), release, lock_s)
        row = locked.ending.row
        figures[f"{lock_s:g} s"] = {
            "status": row["status"], "steps_stored": len(row["metrics"]["steps"]), "steps_expected": 60,
            "all_steps_stored": row["metrics"]["steps"] == locked.expected_steps,
            "steps_applied_while_locked": locked.steps_applied_while_locked,
            "status_answers_while_locked": locked.status_answers_while_locked,
            "slowest_status_s": locked.slowest_status_s, "finalize_wait_s": locked.finalize_wait_s,
            "slowest_status_at_finalize_s": locked.slowest_status_at_finalize_s,
        }
    return figures


def disk(lab: Lab) -> dict[str, Any]:
    server = lab.server("disk")
    folder = server.home / "outputs"
    figures = {}
    with read_only_folder(folder / "read-only") as how:
        if how is not None:
            row = run_to_end(server, lab.body(max_steps=4, output_dir="read-only/run")).row
            figures["read-only"] = {"how": how, "status": row["status"], "message": row["error_message"]}
    with full_folder(folder / "full", "run/checkpoint-2") as how:
        ending = run_to_end(server, lab.body(max_steps=6, save_steps=2, output_dir="full/run"))
        figures["full"] = {"how": how, "status": ending.row["status"], "message": ending.row["error_message"],
                           "steps_stored": ending.row["metrics"]["steps"]}
    return figures


def garbage(lab: Lab) -> dict[str, Any]:
    server = lab.server("garbage", "fault_workers:garbage_flood")
    ending = run_to_end(server, lab.body(max_steps=50))
    return {"garbage_sent": GARBAGE_COUNT, "skipped": ending.status_answer["malformed_events"],
            "status": ending.row["status"], "steps_streamed": len(ending.streamed_steps),
            "steps_stored": len(ending.row["metrics"]["steps"]), "steps_expected": 50}


def fuzz(lab: Lab, examples: int, seed: int) -> dict[str, Any]:
    server = lab.server("fuzz", "fault_workers:completes_at_once", log_level="info", HF_HUB_OFFLINE="1")
    known = 3
    for _ in range(known):
        run_to_end(server, lab.body(max_steps=1))
    began = time.monotonic()
    result = run_schemathesis(server, lab.assets, known, examples, seed, lab.workdir / "st")
    seconds = time.monotonic() - began
    log = (server.home / "server-stderr.log").read_text()
    started = len(re.findall(r"run \d+: worker pid \d+", log)) - known
    return {"cases": result.cases, "returncode": result.returncode, "runs_started_by_fuzzing": started,
            "tracebacks_in_server_log": log.count("Traceback"), "seconds": seconds, "max_examples": examples,
            "seed": seed, "version": version("schemathesis"), "command": result.command,
            "output_tail": result.output[-4000:]}


def path_attacks(lab: Lab) -> dict[str, Any]:
    # The canary is the server's working folder: names that exist there must not be read.
    canary = Canary.plant(lab.workdir / "paths" / "outside")
    server = lab.server("paths", "fault_workers:reads_what_it_is_given", cwd=canary.root)
    plant_escape_links(server.home, canary)
    client = server.client()
    attempts = send_attacks(client, lab.body, attack_table(server.home, canary))
    runs_started = client.get("/api/runs").json()["total"]
    delete = attack_delete(client, lab.body, canary)
    return {
        "attempts": len(attempts), "refused_naming_the_field": sum(a.refused_naming_the_field for a in attempts),
        "by_field": dict(Counter(a.field for a in attempts)), "statuses": dict(Counter(a.status for a in attempts)),
        "not_refused": [f"{a.route} {a.field}={a.value!r}: {a.status}" for a in attempts if not a.refused_naming_the_field],
        "runs_started_by_attacks": runs_started, "delete": delete.__dict__,
        "canary_changes": canary.changes(), "atime_tracked": atime_is_tracked(lab.workdir),
    }


def secrets(lab: Lab) -> dict[str, Any]:
    values = make_secrets()
    figures = {}
    with s3_bucket_with(lab.assets.alpaca) as source:
        server = lab.server("secrets-real", log_level="debug")
        row, leaks = run_with_secrets(server, with_secrets(lab.body(max_steps=6, local_datasets=[]), values, source), values)
        figures["real run reading S3 with the keys"] = {"status": row["status"], "leaks": leaks}
    server = lab.server("secrets-echo", "fault_workers:echoes_secrets", log_level="debug")
    unreachable = {"bucket": "b", "prefix": "", "region": "us-east-1", "endpoint_url": "http://127.0.0.1:9"}
    row, leaks = run_with_secrets(server, with_secrets(lab.body(max_steps=3, local_datasets=[]), values, unreachable), values)
    figures["worker echoing the secrets"] = {"status": row["status"], "error": row["error_message"], "leaks": leaks}
    return figures


def auth(lab: Lab) -> dict[str, Any]:
    server = lab.server("auth", "fault_workers:completes_at_once")
    for _ in range(3):
        run_to_end(server, lab.body(max_steps=1))
    sweep = sweep_auth(server, lab.body)
    return {**sweep.__dict__, "keys": sweep_keys(server, lab.body).__dict__}


def load(lab: Lab, clients: int, pollers: int, steps: int, step_s: float) -> dict[str, Any]:
    server = lab.server("load", "scripted_workers:trainer", SCRIPTED_STEP_SECONDS=str(step_s))
    result = run_sse_load(server, lab.body, clients, pollers, steps)
    return {
        "clients": clients, "pollers": pollers, "steps": steps, "step_seconds": step_s,
        "clients_with_every_step_in_order_once": result.clients_with_every_step(), "problems": result.problems()[:10],
        "latency_p50_ms": result.latency_ms(0.50), "latency_p99_ms": result.latency_ms(0.99),
        "latency_max_ms": result.latency_ms(1.0), "deliveries": sum(len(c.steps) for c in result.clients),
        "polls": result.polls, "poll_failures": result.poll_failures,
        "rss_before_mb": result.rss_before_mb, "rss_peak_mb": max(result.rss_mb), "rss_end_mb": result.rss_mb[-1],
    }


SECTIONS: dict[str, Callable[[Lab, argparse.Namespace], dict[str, Any]]] = {
    "worker-kills": lambda lab, a: worker_kills(lab, a.kill_trials, a.seed),
    "wedged": lambda lab, a: wedged(lab),
    "server-kill": lambda lab, a: server_kills(lab, a.server_kill_trials),
    "preemption": lambda lab, a: preemption(lab, a.preemption_trials),
    "database-lock": lambda lab, a: database_lock(lab),
    "disk": lambda lab, a: disk(lab),
    "garbage": lambda lab, a: garbage(lab),
    "fuzz": lambda lab, a: fuzz(lab, a.fuzz_examples, a.seed),
    "path-attacks": lambda lab, a: path_attacks(lab),
    "secrets": lambda lab, a: secrets(lab),
    "auth": lambda lab, a: auth(lab),
    "load": lambda lab, a: load(lab, a.clients, a.pollers, a.load_steps, a.step_seconds),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(SECTIONS), help="run these sections only")
    parser.add_argument("--seed", type=int, default=20251130)
    parser.add_argument("--kill-trials", type=int, default=30)
    parser.add_argument("--server-kill-trials", type=int, default=3)
    parser.add_argument("--preemption-trials", type=int, default=3)
    parser.add_argument("--fuzz-examples", type=int, default=200)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--pollers", type=int, default=20)
    parser.add_argument("--load-steps", type=int, default=400)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    args = parser.parse_args(argv)

    figures = json.loads(OUT.read_text()) if OUT.exists() else {}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tunelab-reliability-") as folder:
        lab = Lab(Path(folder))
        try:
            for name in args.only or list(SECTIONS):
                print(f"== {name}", flush=True)
                began = time.monotonic()
                figures[name] = {**SECTIONS[name](lab, args), "wall_seconds": time.monotonic() - began}
                print(json.dumps(figures[name], indent=1, default=str)[:3000], flush=True)
                figures["machine"] = machine()
                OUT.write_text(json.dumps(figures, indent=1, default=str))
        finally:
            lab.close()
    DOC.write_text(render(figures))
    print(f"wrote {DOC.relative_to(ROOT)} and {OUT.relative_to(ROOT)}")


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.platform(),
            "root": os.geteuid() == 0, "date": time.strftime("%Y-%m-%d")}


if __name__ == "__main__":
    main()
