"""Names and paths longer than the file system allows. On Python 3.11 looking such a
path up (`Path.exists()`, `is_dir()`) raises ENAMETOOLONG instead of answering False, so
every route that looks a path up must turn it into a 4xx naming the field — and a run
row that stores such a path (written before this check existed, or by hand) must never
make the history unreadable."""

from __future__ import annotations

from checkpoint_factory import make_checkpoint, write_safetensors
from harness import worker_env
from tunelab.store import Store

# The config's own length limits (config/run_config.py) or the file-system check (paths.py), whichever
# sees the value first; either way a 422 naming the field and the length.
TOO_LONG = ("longer than this file system allows", "bytes", "characters")


def _refused(response, field):
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"].split(".")[0] == field and any(words in error["message"] for words in TOO_LONG), error
    return error


def _stored_run(home, demo_run, status, output_dir) -> int:
    with Store(home / "tunelab.db") as store:
        config = {**demo_run(max_steps=4), "output_dir": str(output_dir)}
        run_id = store.create_run(config, config["model_name"], "alpaca", None, None)
        store.finalize_run(run_id, status=status, final_step=2, total_steps=4, output_dir=str(output_dir))
    return run_id


def test_over_long_names_at_start_preview_and_resume_are_refused_by_field(start_server, demo_run):
    server = start_server(extra_env=worker_env("scripted_workers:trainer"))
    client = server.client()
    _refused(client.post("/api/train/start", json=demo_run(output_dir="o" * 300)), "output_dir")
    _refused(client.post("/api/train/start", json=demo_run(output_dir="/tmp/" + "d/" * 2100)), "output_dir")
    _refused(client.post("/api/train/start", json=demo_run(model_name="m" * 256)), "model_name")
    _refused(client.post("/api/datasets/preview", json=demo_run(model_name="org/" + "m" * 256)), "model_name")
    _refused(client.post("/api/train/start", json=demo_run(resume_from="r" * 300)), "resume_from")
    _refused(client.post("/api/train/start", json=demo_run(dataset="d" * 300, local_datasets=[])), "dataset")
    _refused(client.post("/api/train/start", json=demo_run(local_datasets=["x" * 300 + ".jsonl"])), "local_datasets")
    assert client.get("/api/runs").json()["total"] == 0


def test_an_over_long_export_dest_is_refused_by_field(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    folder = home / "outputs" / "done"
    folder.mkdir(parents=True)
    write_safetensors(folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text("{}")
    run_id = _stored_run(home, demo_run, "completed", folder)
    client = start_server(home=home, extra_env={"TUNELAB_PREWARM": "0"}).client()
    _refused(client.post(f"/api/runs/{run_id}/export", json={"dest": "e" * 256}), "dest")


def test_a_stored_over_long_output_dir_keeps_the_history_readable(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    good_folder = home / "outputs" / "good"
    make_checkpoint(good_folder, 2)
    good = _stored_run(home, demo_run, "error", good_folder)
    bad = _stored_run(home, demo_run, "error", home / "outputs" / ("b" * 300))
    client = start_server(home=home, extra_env=worker_env("scripted_workers:trainer")).client()
    listed = client.get("/api/runs")
    assert listed.status_code == 200, listed.text
    assert {r["id"]: r["can_resume"] for r in listed.json()["runs"]} == {good: True, bad: False}
    assert client.get(f"/api/runs/{bad}").status_code == 200
    resumed = client.post(f"/api/runs/{bad}/resume")
    assert 400 <= resumed.status_code < 500, resumed.text
    exported = client.post(f"/api/runs/{bad}/export")
    assert 400 <= exported.status_code < 500, exported.text
    deleted = client.delete(f"/api/runs/{bad}", params={"delete_artifacts": "true"})
    assert deleted.status_code < 500, deleted.text
