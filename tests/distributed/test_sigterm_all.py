"""SIGTERM to every process of a distributed run at once, as Slurm's scancel and its time
limit send it: the head's `tunelab train` (in the foreground, as a job step runs it), the
launcher worker, torchrun and every rank. Each rank gets the supervisor's signal and then
torchrun's forwarded copy, the worker gets its own after the CLI's stop request, and the
CLI gets a second copy as srun forwards one at a time limit; the run must still be
recorded `stopped` with a valid checkpoint of the step it reached, resumable, and every
process gone within 30 s."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from dist_helpers import (WAIT_S, alive, descendants, is_alive, is_torchrun, ranks_under, two_rank_config,
                          wait_until)
from tunelab.checkpoints import validate_checkpoint
from tunelab.server.routes_runs import can_resume
from tunelab.store import Store

pytestmark = pytest.mark.slow

ALL_GONE_S = 30  # the bound: every process of the job ends within 30 s of the signal
PARENT_FIRST_S = 0.1  # time for the CLI's stop request to reach the worker over its queue (milliseconds)


def _stored_step(home: Path) -> int:
    try:
        with Store(home / "tunelab.db", retry_seconds=1) as store:
            runs = store.list_runs(limit=1)
            return max((m["step"] for m in store.get_metrics(runs[0]["id"])), default=0) if runs else 0
    except Exception:  # noqa: BLE001 - the database may not exist yet
        return 0


def test_sigterm_to_every_process_of_the_job_stops_and_saves(demo_assets, home, tmp_path):
    # save_steps far beyond the steps reached: the checkpoint on disk is the one the stop wrote.
    config = two_rank_config(demo_assets, steps=400, save_steps=1000)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    log = home / "train.log"
    env = {**os.environ, "TUNELAB_HOME": str(home), "COLUMNS": "160"}
    cli = subprocess.Popen([sys.executable, "-m", "tunelab.cli.main", "train", "--local", str(path)], env=env,
                           stdout=log.open("w"), stderr=subprocess.STDOUT)
    job: list[psutil.Process] = []
    try:
        assert wait_until(lambda: _stored_step(home) >= 2, timeout=WAIT_S, poll=0.1), log.read_text()[-3000:]
        ranks = ranks_under(cli.pid)
        job = [psutil.Process(cli.pid), *descendants(cli.pid)]
        torchrun = [p for p in job if is_torchrun(p)]
        assert sorted(ranks) == [0, 1] and len(torchrun) == 1, [p.cmdline() for p in job]
        launcher = torchrun[0].parent()  # the run's worker: it relays the ranks' last word
        # The whole job, as Slurm signals a job step, in the order that once lost the run:
        # the CLI first, so that its stop-and-save reaches the worker before the worker's
        # own SIGTERM does (which must then count as the same stop, not as a second signal).
        job[0].send_signal(signal.SIGTERM)
        time.sleep(PARENT_FIRST_S)
        for process in job[1:]:
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        # At a Slurm time limit the CLI gets the signal twice (the step's kill, and srun's
        # forwarded copy): that is still one stop-and-save, not a cancel.
        job[0].send_signal(signal.SIGTERM)
        ranks_outlived_launcher: list[int] = []

        def all_gone() -> bool:
            # A worker that dies of its SIGTERM takes torchrun with it, and the ranks follow
            # a moment later, maybe halfway through their save: the worker must end last.
            if not is_alive(launcher):
                ranks_outlived_launcher.extend(r for r, p in ranks.items() if is_alive(p))
            return not alive(job)

        gone = wait_until(all_gone, timeout=ALL_GONE_S, poll=0.02)
        assert gone, f"still running {ALL_GONE_S} s after SIGTERM: {[p.cmdline() for p in alive(job)]}\n" \
                     + log.read_text()[-3000:]
        code = cli.wait(timeout=5)
    finally:
        for process in alive(job) + ([psutil.Process(cli.pid)] if cli.poll() is None else []):
            process.kill()
    text = log.read_text()
    assert not ranks_outlived_launcher, f"ranks {sorted(set(ranks_outlived_launcher))} outlived the worker\n{text[-3000:]}"
    assert code == 130, text[-3000:]
    with Store(home / "tunelab.db") as store:
        row = store.list_runs(limit=1)[0]
        steps = [m["step"] for m in store.get_metrics(row["id"])]
        resumable = can_resume(store, row["id"])
    assert row["status"] == "stopped" and not row["cancel_requested"] and row["error_message"] is None, (row, text[-3000:])
    assert row["final_step"] and row["final_step"] >= 2, row
    validate_checkpoint(Path(row["output_dir"]) / f"checkpoint-{row['final_step']}")
    assert steps == list(range(1, row["final_step"] + 1))
    assert resumable
