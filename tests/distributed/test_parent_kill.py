"""The process that runs the orchestrator (the server) is killed with SIGKILL while a
2-rank run trains: the worker notices its parent is gone, torchrun dies with the worker
(PR_SET_PDEATHSIG) and each rank with torchrun (its own parent watch), all within 5 s.
The single-process version, with the restart and resume after it, is
tests/reliability/test_server_kill.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dist_helpers import WAIT_S, alive, descendants, is_rank, is_torchrun, two_rank_config, wait_until

pytestmark = pytest.mark.slow

PARENT = Path(__file__).with_name("dist_parent.py")
ALL_GONE_S = 5  # issue 11: every rank exits within 5 s of the server's death


def test_a_killed_parent_takes_torchrun_and_every_rank_with_it(demo_assets, home):
    config = two_rank_config(demo_assets, steps=400)
    parent = subprocess.Popen([sys.executable, str(PARENT), json.dumps(config)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TUNELAB_HOME": str(home)})
    try:
        deadline = time.monotonic() + WAIT_S
        for line in parent.stdout:  # progress lines: the ranks are training
            if json.loads(line)["step"] >= 2 or time.monotonic() > deadline:
                break
        training = descendants(parent.pid)
        ranks = [p for p in training if is_rank(p)]
        torchrun = [p for p in training if is_torchrun(p)]
        assert len(ranks) == 2 and len(torchrun) == 1, f"not training 2 ranks: {[p.cmdline() for p in training]}"
        worker = [p for p in training if p.ppid() == parent.pid and torchrun[0].ppid() == p.pid]
        assert len(worker) == 1

        parent.kill()
        killed_at = time.monotonic()
        parent.wait()
        gone = wait_until(lambda: not alive([*worker, *torchrun, *ranks]), timeout=60)
        gone_after = time.monotonic() - killed_at
        print(f"parent killed: worker, torchrun and both ranks gone after {gone_after:.2f} s")  # a figure for RELIABILITY.md
        assert gone, f"still alive 60 s after the parent's death: {[p.pid for p in alive([*worker, *torchrun, *ranks])]}"
        assert gone_after <= ALL_GONE_S, f"the worker, torchrun and the ranks took {gone_after:.1f} s to exit"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()
