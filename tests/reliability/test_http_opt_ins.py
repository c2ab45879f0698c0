"""Over HTTP, settings that run foreign code, write anywhere or send the run's secrets to a
cluster need the server's own opt-in: `trust_remote_code`, `allow_output_outside_root` and
`ray_address` and `nodes` are refused with 403 naming the field and the flag
(`--allow-remote-code`, `--allow-output-anywhere`, `--allow-ray`, `--allow-multi-node`) unless the
server was started with it (`trust_remote_code` without `approved_remote_code_fingerprint` needs
`--allow-unpinned-remote-code`) — at start, at resume of a run that carries them (e.g. one
started from the CLI), and for an export that would load the run's model code. A python
reward (objective grpo) needs `--allow-reward-code` and a file inside the data roots."""

from __future__ import annotations

import pytest

from checkpoint_factory import make_checkpoint
from harness import start_run, wait_run_ended, worker_env
from tunelab.store import Store

OPT_INS = {"trust_remote_code": "--allow-remote-code", "allow_output_outside_root": "--allow-output-anywhere",
           "ray_address": "--allow-ray", "nodes": "--allow-multi-node"}
# The scripted worker never contacts it: what is tested is the server's refusal or consent.
RAY_ADDRESS = "127.0.0.1:6379"
NODES = {"count": 2, "master_addr": "127.0.0.1", "master_port": 29511}
VALUES = {"ray_address": RAY_ADDRESS, "nodes": NODES}


def _opt_in_body(demo_run, field, outside):
    extra = {"output_dir": str(outside)} if field == "allow_output_outside_root" else {}
    if field == "trust_remote_code":  # pinned: what --allow-remote-code admits (unpinned needs more, tested below)
        extra["approved_remote_code_fingerprint"] = "0" * 64
    return demo_run(max_steps=1, **{field: VALUES.get(field, True)}, **extra)


def _stored_cli_run(home, demo_run, **settings) -> int:
    """A run as `tunelab train` would have left it: errored, with a valid checkpoint."""
    folder = home / "outputs" / "cli-run"
    make_checkpoint(folder, 2)
    with Store(home / "tunelab.db") as store:
        config = {**demo_run(max_steps=4), **settings, "output_dir": str(folder)}
        run_id = store.create_run(config, config["model_name"], "alpaca", None, None)
        store.finalize_run(run_id, status="error", final_step=2, total_steps=4, output_dir=str(folder), error_message="crashed")
    return run_id


def test_both_are_refused_without_the_servers_opt_in(start_server, demo_run, tmp_path):
    server = start_server(extra_env=worker_env("scripted_workers:trainer"))
    client = server.client()
    for field, flag in OPT_INS.items():
        response = client.post("/api/train/start", json=_opt_in_body(demo_run, field, tmp_path / "elsewhere"))
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["field"] == field and flag in error["message"] and error["code"] == "opt_in_required"
    assert client.get("/api/runs").json()["total"] == 0
    assert not (tmp_path / "elsewhere").exists()


def test_a_stored_run_carrying_them_is_not_resumed_or_exported_over_http(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    run_id = _stored_cli_run(home, demo_run, trust_remote_code=True)
    server = start_server(home=home, extra_env=worker_env("scripted_workers:trainer"))
    client = server.client()
    resumed = client.post(f"/api/runs/{run_id}/resume")
    assert resumed.status_code == 403, resumed.text
    assert resumed.json()["error"]["field"] == "trust_remote_code"
    assert f"tunelab resume {run_id}" in resumed.json()["error"]["message"]
    exported = client.post(f"/api/runs/{run_id}/export", json={"format": "merged"})
    assert exported.status_code == 403, exported.text
    assert "--allow-remote-code" in exported.json()["error"]["message"]
    assert client.get("/api/runs").json()["total"] == 1


def test_a_stored_ray_run_is_not_resumed_over_http_without_the_opt_in(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    run_id = _stored_cli_run(home, demo_run, ray_address=RAY_ADDRESS)
    server = start_server(home=home, extra_env=worker_env("scripted_workers:trainer"))
    resumed = server.client().post(f"/api/runs/{run_id}/resume")
    assert resumed.status_code == 403, resumed.text
    error = resumed.json()["error"]
    assert error["field"] == "ray_address" and "--allow-ray" in error["message"] and RAY_ADDRESS in error["message"]


@pytest.mark.parametrize("field", list(OPT_INS))
def test_the_servers_opt_in_allows_them(start_server, demo_run, tmp_path, field):
    server = start_server(extra_env=worker_env("scripted_workers:trainer"), extra_args=[OPT_INS[field]])
    client = server.client()
    outside = tmp_path / "elsewhere" / "run"
    run = wait_run_ended(client, start_run(client, _opt_in_body(demo_run, field, outside)))
    assert run["status"] == "completed"
    other = next(f for f in OPT_INS if f != field)
    refused = client.post("/api/train/start", json=_opt_in_body(demo_run, other, outside.parent / "other"))
    assert refused.status_code == 403 and refused.json()["error"]["field"] == other


def test_unpinned_remote_code_needs_the_stronger_opt_in(start_server, demo_run, tmp_path):
    body = demo_run(max_steps=1, trust_remote_code=True)
    pinned_only = start_server(home=tmp_path / "pinned", extra_env=worker_env("scripted_workers:trainer"),
                               extra_args=["--allow-remote-code"]).client()
    refused = pinned_only.post("/api/train/start", json=body)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["field"] == "trust_remote_code" and error["code"] == "opt_in_required"
    assert "--allow-unpinned-remote-code" in error["message"] and "approved_remote_code_fingerprint" in error["message"]
    assert "tunelab fingerprint" in error["message"]
    assert pinned_only.get("/api/runs").json()["total"] == 0

    unpinned = start_server(home=tmp_path / "unpinned", extra_env=worker_env("scripted_workers:trainer"),
                            extra_args=["--allow-unpinned-remote-code"]).client()
    assert wait_run_ended(unpinned, start_run(unpinned, body))["status"] == "completed"


def test_a_python_reward_needs_the_reward_code_opt_in_and_a_file_in_the_data_roots(start_server, demo_run, demo_assets, tmp_path):
    inside = demo_assets.root / "grpo_opt_in_reward.py"  # the demo folder is one of these servers' data roots
    inside.write_text("def one(prompts, completions, **kwargs):\n    return [1.0] * len(completions)\n")
    outside = tmp_path / "elsewhere" / "reward.py"
    outside.parent.mkdir()
    outside.write_text(inside.read_text())

    def body(path):
        return demo_run(max_steps=1, objective="grpo", num_generations=2, local_datasets=[str(demo_assets.alpaca)],
                        rewards=[{"name": "python", "path": str(path), "function": "one"}])

    closed = start_server(home=tmp_path / "closed", extra_env=worker_env("scripted_workers:trainer")).client()
    refused = closed.post("/api/train/start", json=body(inside))
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["field"] == "rewards" and "--allow-reward-code" in error["message"] and error["code"] == "opt_in_required"

    opened = start_server(home=tmp_path / "open", extra_env=worker_env("scripted_workers:trainer"),
                          extra_args=["--allow-reward-code"]).client()
    outside_refused = opened.post("/api/train/start", json=body(outside))
    assert outside_refused.status_code == 422, outside_refused.text
    assert outside_refused.json()["error"]["field"] == "rewards.0.path"
    run = wait_run_ended(opened, start_run(opened, body(inside)))
    assert run["status"] == "completed"
    assert run["config"]["rewards"][0]["path"] == str(inside.resolve())
