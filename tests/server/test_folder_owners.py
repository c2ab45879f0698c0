"""Folders a request names are owned, on a real server with two members: bob can neither
overwrite nor delete alice's export, nor start a run among her files (or files no run
wrote), and deleting his own run with its files removes his folder and his own export
folders only. An export's `dest` obeys the same text rules as every other path.

The runs are completed rows in the real store whose folders hold an adapter's files
(copying an adapter needs no model); the server's runs would use a scripted worker, but
every start here is refused before one is spawned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from conftest import NO_PREWARM, TOKEN, LiveServer, _launch
from sse_helpers import scripted_worker_env
from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

MEMBERS = ("alice", "bob")
ADAPTER_FILES = {"adapter_model.safetensors": b"weights of ", "adapter_config.json": b'{"r": 8}'}


def finished_run(store: Store, outputs: Path, owner: str, folder: str, model: str) -> int:
    """A completed LoRA run of `owner` whose folder holds its adapter's files."""
    run_folder = outputs / folder
    run_folder.mkdir(parents=True)
    for name, content in ADAPTER_FILES.items():
        (run_folder / name).write_bytes(content + owner.encode() if name.endswith("safetensors") else content)
    run_id = store.create_run({"model_name": model, "training_type": "lora"}, model, "alpaca", owned_by=owner)
    store.finalize_run(run_id, status="completed", output_dir=str(run_folder), final_step=5)
    return run_id


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("owners") / "home"
    home.mkdir()
    secrets = {name: new_secret() for name in MEMBERS}
    with Store(home / "tunelab.db") as store:
        for name in MEMBERS:
            store.add_api_key(name, "member", secret_hash(secrets[name]))
        runs = {name: finished_run(store, home / "outputs", name, f"{name}-run", str(demo_assets.model_dir)) for name in MEMBERS}
    server = _launch(home, TOKEN, [demo_assets.root], {**NO_PREWARM, **scripted_worker_env()})
    clients = {name: server.client(token=secrets[name]) for name in MEMBERS}
    yield {"server": server, "home": home, "outputs": home / "outputs", "runs": runs, "as": clients}
    for client in clients.values():
        client.close()
    server.stop()


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()["error"]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_bob_can_neither_overwrite_nor_delete_alices_export(lab, demo_run):
    alice, bob = lab["as"]["alice"], lab["as"]["bob"]
    alice_run, bob_run = lab["runs"]["alice"], lab["runs"]["bob"]
    x = lab["outputs"] / "x"

    exported = alice.post(f"/api/runs/{alice_run}/export", json={"dest": "x"})
    assert exported.status_code == 200, exported.text
    kept = snapshot(x)
    assert kept["adapter_model.safetensors"] == b"weights of alice"

    # bob's export into the same folder, or into a folder inside it, is refused naming alice's run.
    for dest in ("x", "x/inside"):
        error = error_of(bob.post(f"/api/runs/{bob_run}/export", json={"dest": dest}), 409)
        assert error["code"] == "folder_not_owned" and error["field"] == "dest"
        assert f"run {alice_run}'s export" in error["message"] and "'alice'" in error["message"]
        assert "Choose a new folder" in error["message"]

    # A run of bob's may not write there either, nor among files that no run wrote.
    (lab["outputs"] / "loose").mkdir()
    (lab["outputs"] / "loose" / "notes.txt").write_text("someone's notes")
    for folder, named in ((str(x), f"run {alice_run}'s export"), ("x/sub", f"run {alice_run}'s export"),
                          ("loose", "files that no run of owner 'bob' wrote")):
        error = error_of(bob.post("/api/train/start", json=demo_run(output_dir=folder)), 409)
        assert error["code"] == "folder_not_owned" and error["field"] == "output_dir", error
        assert named in error["message"]
    assert not (x / "sub").exists() and snapshot(x) == kept

    # bob exports his own run elsewhere, and may replace that export of his.
    for _ in range(2):
        mine = bob.post(f"/api/runs/{bob_run}/export", json={"dest": "y"})
        assert mine.status_code == 200, mine.text

    # A run of bob's whose folder is alice's export (as a server without this rule accepted)
    # cannot be deleted with its files.
    with Store(lab["home"] / "tunelab.db") as store:
        squatter = store.create_run({"model_name": "m"}, "m", "d", owned_by="bob")
        store.finalize_run(squatter, status="completed", output_dir=str(x))
    error = error_of(bob.delete(f"/api/runs/{squatter}", params={"delete_artifacts": "true"}), 409)
    assert error["code"] == "output_dir_shared" and f"run {alice_run}'s export" in error["message"]
    assert bob.delete(f"/api/runs/{squatter}").status_code == 200  # forgotten, its "files" left alone

    # bob deletes his run with its files: his folder and his export go, alice's export stays.
    deleted = bob.delete(f"/api/runs/{bob_run}", params={"delete_artifacts": "true"})
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["artifacts_removed"] is True
    assert deleted.json()["exports_removed"] == [str(lab["outputs"] / "y")]
    assert not (lab["outputs"] / "bob-run").exists() and not (lab["outputs"] / "y").exists()
    assert snapshot(x) == kept
    assert json.loads(kept["tunelab-export.json"])["run_id"] == alice_run

    # alice still owns her folder: she may export into it again.
    assert alice.post(f"/api/runs/{alice_run}/export", json={"dest": "x"}).status_code == 200


def test_bob_cannot_continue_alices_run_by_its_id_or_its_checkpoint_folder(lab, demo_run):
    alice, bob = lab["as"]["alice"], lab["as"]["bob"]
    alice_run, bob_run = lab["runs"]["alice"], lab["runs"]["bob"]
    checkpoint = lab["outputs"] / "alice-run" / "checkpoint-5"
    checkpoint.mkdir(exist_ok=True)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 5}')
    with Store(lab["home"] / "tunelab.db") as store:
        before = len(store.list_runs())
    # Continuing a run hands over its weights: only its owner (or an admin) may, by id or by folder,
    # whether the start is made, only checked, or a sweep's base.
    for target in (str(alice_run), "alice-run/checkpoint-5", str(checkpoint)):
        for route, body in (("/api/train/start", demo_run(resume_from=target)),
                            ("/api/train/check", demo_run(resume_from=target)),
                            ("/api/sweeps", {"base": demo_run(resume_from=target, eval_steps=2, eval_holdout=0.2), "trials": 1,
                                             "space": {"learning_rate": {"choice": [1e-4, 2e-4]}}})):
            error = error_of(bob.post(route, json=body), 403)
            assert error["code"] == "not_owner" and error["field"] == "resume_from", (route, target, error)
            assert f"run {alice_run}'s checkpoint" in error["message"] and "'alice'" in error["message"]
    with Store(lab["home"] / "tunelab.db") as store:
        assert len(store.list_runs()) == before  # nothing started, nothing queued
    # The owner passes the same check; bob may name his own run.
    assert alice.post("/api/train/check", json=demo_run(resume_from=str(alice_run))).status_code == 200
    assert bob.post("/api/train/check", json=demo_run(resume_from=str(bob_run))).status_code == 200


@pytest.mark.parametrize("dest", ["a\u202eb", "a\nb", "a\x07b", "x\u2066y"])
def test_an_export_dest_with_control_or_bidi_characters_is_refused_naming_the_field(lab, dest):
    answer = lab["as"]["alice"].post(f"/api/runs/{lab['runs']['alice']}/export", json={"dest": dest})
    error = error_of(answer, 422)
    assert error["field"] == "dest" and "control or bidi-override character" in error["message"], error
    assert not any(dest in p.name for p in lab["outputs"].iterdir())


def test_the_cli_refuses_the_same_dest_text(lab):
    env = {**os.environ, "TUNELAB_HOME": str(lab["home"]), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "tunelab.cli.main", "export", str(lab["runs"]["alice"]), "--dest", "a\u202eb"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--dest" in done.stdout + done.stderr and "U+202E" in done.stdout + done.stderr
    assert not any("\u202e" in p.name for p in lab["outputs"].iterdir())
