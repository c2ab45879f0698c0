"""The launcher's last word when ranks fail: it names the rank that failed first and
why, read from torchrun's failure report (the text below is torchrun 2.13's, from a
real run whose rank 1 was killed with SIGKILL) and the ranks' own error files."""

from __future__ import annotations

import signal

from tunelab.worker.launch import launcher

REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
tunelab.worker.launch.rank_entry FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_08:41:32
  host      : localhost
  rank      : {other_rank} (local_rank: {other_rank})
  exitcode  : {other_code} (pid: 11863) 
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : {root_time}
  host      : localhost
  rank      : {root_rank} (local_rank: {root_rank})
  exitcode  : {root_code} (pid: 11864)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 11864
============================================================
"""


def report(root_rank=1, root_code=-9, other_rank=0, other_code=1, root_time="2026-12-01_08:41:32") -> str:
    return REPORT.format(root_rank=root_rank, root_code=root_code, other_rank=other_rank, other_code=other_code,
                         root_time=root_time)


def test_the_root_cause_is_the_first_failure():
    assert launcher._root_cause("rank output\n" + report()) == (1, -9)


def test_a_rank_killed_from_outside_comes_before_one_torchrun_noticed_first_in_the_same_second():
    """Both ranks ended within one of torchrun's polls: it notices them in local-rank
    order and calls rank 0 (which only lost its peer) the root cause."""
    text = report(root_rank=0, root_code=1, other_rank=1, other_code=-9)
    assert launcher._root_cause(text) == (1, -9)


def test_torchruns_own_sigterm_is_a_consequence_not_a_cause():
    text = report(root_rank=1, root_code=1, other_rank=0, other_code=-int(signal.SIGTERM))
    assert launcher._root_cause(text) == (1, 1)


def test_an_earlier_failure_wins_over_a_later_signal():
    text = report(root_rank=0, root_code=1, root_time="2026-12-01_08:41:31", other_rank=1, other_code=-9)
    assert launcher._root_cause(text) == (0, 1)


def test_only_the_last_report_counts():
    older = report(root_rank=1, root_code=-9)
    newer = report(root_rank=0, root_code=1, other_rank=1, other_code=-15).replace("08:41", "09:12")
    assert launcher._root_cause(older + "\n...\n" + newer) == (0, 1)
    assert launcher._root_cause("torchrun started\nno report yet\n") is None


def test_the_reason_names_the_rank_and_its_signal_or_its_own_message(tmp_path):
    assert launcher._failure_reason((1, -9), tmp_path) == "rank 1 was killed by SIGKILL (signal 9)"
    assert launcher._failure_reason((2, 3), tmp_path) == "rank 2 exited with code 3"
    (tmp_path / "rank-2.txt").write_text("OutOfMemoryError: lower batch_size\n")
    assert launcher._failure_reason((2, 1), tmp_path) == "rank 2 failed: OutOfMemoryError: lower batch_size"


def test_a_resumed_runs_launch_reads_only_its_own_part_of_the_log(tmp_path):
    """A resumed run shares its parent's folder and appends to its torchrun.log."""
    log = tmp_path / "torchrun.log"
    log.write_text(report())  # the run this one resumes failed
    engine = launcher.ProcessEngine(log)
    engine.popen(["sh", "-c", "echo this launch trains"], {})
    assert engine.process.wait(10) == 0
    assert engine.own_log() == "this launch trains\n"
    assert launcher._root_cause(engine.own_log()) is None
    assert "Root Cause" not in engine.log_tail()
