"""Resuming: stop-and-save then resume continues the step count in the same folder; the
rules for what may resume; `resume_from` given as a run id or a checkpoint folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import scripted_workers as sw
from checkpoint_factory import make_checkpoint
from orch_helpers import finished, scripted_config

from tunelab import paths
from tunelab.config.run_config import ConfigError
from tunelab.orchestrator import NotResumable, PathNotAllowed


def _stopped_run(orch, recorder, monkeypatch, at_step: int = 3) -> int:
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.05")
    run_id = orch.start(scripted_config(max_steps=12))
    recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= at_step)
    orch.stop(save=True)
    assert finished(orch, run_id)["status"] == "stopped"
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0")
    return run_id


def test_resume_continues_the_step_count_in_the_same_folder(orchestrator_for, store, monkeypatch):
    orch, recorder = orchestrator_for(sw.trainer)
    first = _stopped_run(orch, recorder, monkeypatch)
    first_row = store.get_run(first)
    stopped_at = first_row["final_step"]

    second = orch.resume(first)
    row = finished(orch, second)
    assert row["status"] == "completed"
    assert row["resumed_from_run_id"] == first
    assert row["output_dir"] == first_row["output_dir"]
    assert row["config"]["resume_from"] == str(Path(first_row["output_dir"]) / f"checkpoint-{stopped_at}")
    assert [m["step"] for m in store.get_metrics(second)] == list(range(stopped_at + 1, 13))
    assert store.get_run(first)["resumed_by_run_id"] == second
    with pytest.raises(NotResumable, match=f"already resumed as run {second}"):
        orch.resume(first)
    with pytest.raises(NotResumable, match="completed"):
        orch.resume(second)


def test_an_error_run_resumes_from_its_latest_valid_checkpoint(orchestrator_for, store):
    orch, _ = orchestrator_for(sw.killed_mid_run)
    crashed = orch.start(scripted_config(max_steps=7))
    row = finished(orch, crashed)
    assert row["status"] == "error"
    with pytest.raises(NotResumable, match="no valid checkpoint"):
        orch.resume(crashed)
    make_checkpoint(Path(row["output_dir"]), 4)
    make_checkpoint(Path(row["output_dir"]), 6, optimizer=None)  # incomplete: skipped

    resumer, _ = orchestrator_for(sw.trainer)
    resumed = resumer.resume(crashed)
    assert finished(resumer, resumed)["config"]["resume_from"].endswith("checkpoint-4")
    assert store.get_metrics(resumed)[0]["step"] == 5


def test_unknown_and_running_runs_are_not_resumable(orchestrator_for, monkeypatch, tmp_path):
    orch, recorder = orchestrator_for(sw.waits_for_file)
    with pytest.raises(NotResumable) as missing:
        orch.resume(4242)
    assert missing.value.http_status == 404
    monkeypatch.setenv("SCRIPTED_RELEASE_FILE", str(tmp_path / "go"))
    run_id = orch.start(scripted_config())
    recorder.wait_for(lambda e: e["type"] == "progress")
    with pytest.raises(NotResumable, match="still running"):
        orch.resume(run_id)
    (tmp_path / "go").touch()
    finished(orch, run_id)


def test_resume_from_a_run_id_or_a_checkpoint_folder(orchestrator_for, store, monkeypatch):
    orch, recorder = orchestrator_for(sw.trainer)
    stopped = _stopped_run(orch, recorder, monkeypatch)
    stopped_at = store.get_run(stopped)["final_step"]

    by_id = orch.start(scripted_config(max_steps=12, resume_from=str(stopped)))
    row = finished(orch, by_id)
    assert row["resumed_from_run_id"] == stopped
    assert store.get_metrics(by_id)[0]["step"] == stopped_at + 1

    folder = Path(store.get_run(stopped)["output_dir"]) / f"checkpoint-{stopped_at}"
    by_folder = orch.start(scripted_config(max_steps=12, resume_from=str(folder)))
    assert finished(orch, by_folder)["status"] == "completed"
    assert store.get_metrics(by_folder)[0]["step"] == stopped_at + 1


def test_bad_resume_from_is_refused_before_anything_starts(orchestrator_for, store, tmp_path):
    orch, _ = orchestrator_for(sw.trainer)
    outside = make_checkpoint(tmp_path / "elsewhere", 3)
    with pytest.raises(PathNotAllowed) as not_allowed:
        orch.start(scripted_config(resume_from=str(outside)))
    assert not_allowed.value.field == "resume_from"

    broken = make_checkpoint(paths.outputs_root() / "old-run", 3, scheduler=None)
    with pytest.raises(ConfigError) as invalid:
        orch.start(scripted_config(resume_from=str(broken)))
    assert invalid.value.errors[0].field == "resume_from" and "scheduler" in invalid.value.errors[0].message

    with pytest.raises(ConfigError, match="there is no run 77"):
        orch.start(scripted_config(resume_from="77"))
    assert store.count_runs() == 0
    assert not orch.is_training_active()


def test_output_dir_outside_the_root_needs_explicit_permission(orchestrator_for, store, tmp_path):
    orch, _ = orchestrator_for(sw.trainer)
    with pytest.raises(PathNotAllowed) as refused:
        orch.start(scripted_config(output_dir=str(tmp_path / "out")))
    assert refused.value.field == "output_dir" and store.count_runs() == 0
    run_id = orch.start(scripted_config(output_dir=str(tmp_path / "out"), allow_output_outside_root=True))
    row = finished(orch, run_id)
    assert row["status"] == "completed" and row["output_dir"] == str((tmp_path / "out").resolve())


def test_a_run_is_resumable_again_when_its_resumption_was_cancelled_or_deleted(orchestrator_for, store, monkeypatch):
    orch, recorder = orchestrator_for(sw.trainer)
    first = _stopped_run(orch, recorder, monkeypatch)
    stopped_at = store.get_run(first)["final_step"]

    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.05")
    cancelled = orch.resume(first)
    recorder.wait_for(lambda e: e["type"] == "progress" and e["run_id"] == cancelled)
    orch.stop(save=False, expected_run_id=cancelled)
    assert finished(orch, cancelled)["status"] == "stopped"
    # The cancelled continuation kept nothing: the original picks up where it stopped.
    deleted = orch.resume(first)
    assert store.get_run(first)["resumed_by_run_id"] == deleted
    recorder.wait_for(lambda e: e["type"] == "progress" and e["run_id"] == deleted)
    orch.stop(save=True, expected_run_id=deleted)
    assert finished(orch, deleted)["status"] == "stopped"
    with pytest.raises(NotResumable, match=f"already resumed as run {deleted}"):
        orch.resume(first)  # that continuation saved newer steps: resume it instead

    store.delete_run(deleted)
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0")
    third = orch.resume(first)
    row = finished(orch, third)
    assert row["status"] == "completed"
    assert row["config"]["resume_from"].endswith(f"checkpoint-{stopped_at}")  # the original's own save
    assert store.get_metrics(third)[0]["step"] == stopped_at + 1


def test_a_run_whose_resumption_failed_before_its_first_step_is_resumable_again(orchestrator_for, store, monkeypatch):
    orch, recorder = orchestrator_for(sw.trainer)
    first = _stopped_run(orch, recorder, monkeypatch)
    crasher, _ = orchestrator_for(sw.crashes_at_start)
    failed = crasher.resume(first)
    assert finished(crasher, failed)["status"] == "error"
    again = orch.resume(first)
    assert finished(orch, again)["status"] == "completed"
    assert store.get_run(first)["resumed_by_run_id"] == again


def test_resume_takes_the_secrets_again_and_refuses_up_front_without_them(orchestrator_for, store, monkeypatch):
    secrets = {"hf_token": "hf_resume_secret_1", "s3": {"bucket": "b", "access_key_id": "AKIA_RESUME_2",
                                                        "secret_access_key": "resume_secret_3"}}
    orch, recorder = orchestrator_for(sw.trainer)
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0.05")
    first = orch.start(scripted_config(max_steps=12, **secrets))
    recorder.wait_for(lambda e: e["type"] == "progress" and e["step"] >= 2)
    orch.stop(save=True)
    stored = finished(orch, first)["config"]
    assert stored["secrets_used"] == ["hf_token", "s3.access_key_id", "s3.secret_access_key"]
    monkeypatch.setenv(sw.STEP_SECONDS_ENV, "0")
    for name in ("HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)

    with pytest.raises(ConfigError) as refused:
        orch.resume(first)
    assert [e.field for e in refused.value.errors] == ["hf_token", "s3.access_key_id", "s3.secret_access_key"]
    assert "HF_TOKEN" in refused.value.errors[0].message
    assert store.count_runs() == 1  # nothing was started

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "resume_secret_3")  # one from the environment
    second = orch.resume(first, {"hf_token": "hf_resume_secret_1", "s3": {"access_key_id": "AKIA_RESUME_2"}})
    assert sorted(orch._runs[second].cfg.secret_values()) == sorted(["hf_resume_secret_1", "AKIA_RESUME_2", "resume_secret_3"])
    assert finished(orch, second)["status"] == "completed"
    assert store.get_run(second)["config"]["secrets_used"] == stored["secrets_used"]
    files = (paths.db_path(), Path(f"{paths.db_path()}-wal"))
    database = b"".join(f.read_bytes() for f in files if f.exists())
    assert not any(secret.encode() in database for secret in ("hf_resume_secret_1", "AKIA_RESUME_2", "resume_secret_3"))
