"""A run never writes into another run's files: an `output_dir` that is, lies inside or
holds another recorded run's folder is refused naming that run, and so is an export
`dest` inside another run's folder. A resume continuing in the folder of the run it
resumes is the one exception."""

from __future__ import annotations

from checkpoint_factory import make_checkpoint, write_safetensors
from harness import start_run, wait_run_ended, worker_env
from tunelab.store import Store


def _refused_naming(response, field, run_id):
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field and f"run {run_id}" in error["message"], error


def _stored_run(home, demo_run, status, folder) -> int:
    with Store(home / "tunelab.db") as store:
        config = {**demo_run(max_steps=4), "output_dir": str(folder)}
        run_id = store.create_run(config, config["model_name"], "alpaca", None, None)
        store.finalize_run(run_id, status=status, final_step=2, total_steps=4, output_dir=str(folder))
    return run_id


def test_a_new_run_cannot_take_or_nest_in_another_runs_folder(start_server, demo_run):
    server = start_server(extra_env=worker_env("scripted_workers:trainer"))
    client = server.client()
    first = wait_run_ended(client, start_run(client, demo_run(max_steps=2, output_dir="team/first")))
    assert first["status"] == "completed"
    folder = first["output_dir"]
    for taken in (folder, "team/first", f"{folder}/inner", "team"):
        _refused_naming(client.post("/api/train/start", json=demo_run(max_steps=2, output_dir=taken)), "output_dir", first["id"])
    second = wait_run_ended(client, start_run(client, demo_run(max_steps=2, output_dir="team/second")))
    assert second["status"] == "completed"
    assert client.get("/api/runs").json()["total"] == 2


def test_an_export_cannot_land_in_another_runs_folder(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    folders = {name: home / "outputs" / name for name in ("victim", "exported")}
    for folder in folders.values():
        folder.mkdir(parents=True)
        write_safetensors(folder / "adapter_model.safetensors")
        (folder / "adapter_config.json").write_text("{}")
    victim = _stored_run(home, demo_run, "completed", folders["victim"])
    exported = _stored_run(home, demo_run, "completed", folders["exported"])
    client = start_server(home=home, extra_env={"TUNELAB_PREWARM": "0"}).client()
    for dest in ("victim", "victim/export-adapter", str(folders["victim"] / "deep" / "er")):
        _refused_naming(client.post(f"/api/runs/{exported}/export", json={"dest": dest}), "dest", victim)
    assert sorted(p.name for p in folders["victim"].iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    own = client.post(f"/api/runs/{exported}/export", json={"dest": str(folders["exported"] / "mine")})
    assert own.status_code == 200, own.text
    elsewhere = client.post(f"/api/runs/{exported}/export", json={"dest": "exports/adapter"})
    assert elsewhere.status_code == 200, elsewhere.text


def test_a_resume_continues_in_the_folder_of_the_run_it_resumes(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    folder = home / "outputs" / "interrupted"
    make_checkpoint(folder, 2)
    run_id = _stored_run(home, demo_run, "error", folder)
    client = start_server(home=home, extra_env=worker_env("scripted_workers:trainer")).client()
    resumed = client.post(f"/api/runs/{run_id}/resume")
    assert resumed.status_code == 200, resumed.text
    row = wait_run_ended(client, resumed.json()["job_id"])
    assert row["status"] == "completed" and row["output_dir"] == str(folder)
