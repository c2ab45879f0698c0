"""The CLI's side of handing a run to a server: finding the server, and the body it sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from tunelab.cli import remote_run
from tunelab.config.run_config import parse_config
from tunelab.config.resume import secrets_from_environment


def test_no_file_no_server(home):
    said = []
    assert remote_run.find_server(said.append) is None
    assert said == ["no tunelab server is running on this home: training in this process"]


def test_a_file_naming_a_dead_pid_is_ignored(home):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (home / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:9/", "pid": gone.pid}))
    said = []
    assert remote_run.find_server(said.append) is None
    assert f"pid {gone.pid}, which is not running" in said[0]


def test_a_live_pid_that_does_not_answer_is_ignored(home):
    # This test's own pid is alive, but nothing serves tunelab on port 9.
    (home / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:9/", "pid": os.getpid(),
                                                  "started_at": time.time()}))
    said = []
    assert remote_run.find_server(said.append) is None
    assert "does not answer: training in this process" in said[0]


def test_a_garbled_file_is_no_server(home):
    (home / "server.json").write_text("{not json")
    assert remote_run.find_server(lambda _: None) is None


def test_start_payload_sends_the_given_settings_with_secrets_in_plain(tmp_path, monkeypatch):
    model = tmp_path / "models" / "tiny"
    model.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    cfg = parse_config({"model_name": "models/tiny", "dataset": "org/rows", "max_steps": 5, "hf_token": "hf_abc123",
                        "s3": None})
    body = remote_run.start_payload(cfg)
    assert body["hf_token"] == "hf_abc123"
    assert body["model_name"] == str(model)  # the server's working folder is not ours
    assert body["max_steps"] == 5 and "learning_rate" not in body  # defaults are the server's to apply
    hub = remote_run.start_payload(parse_config({"model_name": "org/model", "dataset": "org/rows", "max_steps": 5}))
    assert hub["model_name"] == "org/model"


def test_secrets_for_a_resume_come_from_the_environment_in_the_request_shape():
    environ = {"HF_TOKEN": "hf_abc", "AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "HOME": "/root"}
    assert secrets_from_environment(environ) == {"hf_token": "hf_abc",
                                                 "s3": {"access_key_id": "AKIA1", "secret_access_key": "s3cr3t"}}
    assert secrets_from_environment({}) == {}
