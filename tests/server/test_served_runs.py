"""Finished runs the server works with, on a real server: a run being exported or
answering a chat cannot be deleted (409 naming the use, where deleting used to break the
work with a 500), an idle loaded model goes with its run, `/v1/models` shows members and
viewers no server paths, and a lone UTF-16 surrogate in any text field is a 400.

The runs are completed rows in the real store: one whose folder is a copy of the demo
model (a full fine-tune the inference child really loads), one with an adapter's files.
Work is held in place by stopping its child process (SIGSTOP), the fault a slow merge or
a long answer is to the server.
"""

from __future__ import annotations

import json
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import httpx
import psutil
import pytest

from conftest import NO_PREWARM, TOKEN, LiveServer, _launch
from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

pytestmark = pytest.mark.slow
KEYS = {"alice": "member", "viewer": "viewer"}
CHILD_WAIT_S = 120


def completed_run(store: Store, folder: Path, model: str, owner: str) -> int:
    run_id = store.create_run({"model_name": model, "training_type": "lora"}, model, "alpaca", owned_by=owner)
    store.finalize_run(run_id, status="completed", output_dir=str(folder), final_step=5)
    return run_id


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("served") / "home"
    outputs = home / "outputs"
    shutil.copytree(demo_assets.model_dir, outputs / "full-run")
    (outputs / "adapter-run").mkdir()
    (outputs / "adapter-run" / "adapter_model.safetensors").write_bytes(b"not really weights")
    (outputs / "adapter-run" / "adapter_config.json").write_text("{}")
    secrets = {name: new_secret() for name in KEYS}
    model = str(demo_assets.model_dir)
    with Store(home / "tunelab.db") as store:
        for name, role in KEYS.items():
            store.add_api_key(name, role, secret_hash(secrets[name]))
        runs = {"full": completed_run(store, outputs / "full-run", model, "alice"),
                "adapter": completed_run(store, outputs / "adapter-run", model, "alice")}
    server = _launch(home, TOKEN, [demo_assets.root], NO_PREWARM)
    yield {"server": server, "home": home, "runs": runs, "secrets": secrets}
    server.stop()


def client(lab: dict[str, Any], name: str | None = None) -> httpx.Client:
    server: LiveServer = lab["server"]
    return server.client(token=lab["secrets"][name] if name else TOKEN, timeout=300)


def child_of(server: LiveServer, module: str, work: Future) -> psutil.Process:
    """The server's child process running `module`, once it has started (the work must still be going)."""
    deadline = time.monotonic() + CHILD_WAIT_S
    while time.monotonic() < deadline:
        for process in psutil.Process(server.pid).children(recursive=True):
            try:
                if module in " ".join(process.cmdline()):
                    return process
            except psutil.NoSuchProcess:
                continue
        assert not work.done(), f"the work ended before its {module} child was seen: {work.result().text}"
        time.sleep(0.01)
    raise AssertionError(f"no {module} child within {CHILD_WAIT_S} s")


def refused_delete(lab: dict[str, Any], run_id: int, use: str) -> None:
    with client(lab, "alice") as alice:
        answer = alice.delete(f"/api/runs/{run_id}", params={"delete_artifacts": "true"})
    assert answer.status_code == 409, answer.text
    error = answer.json()["error"]
    assert error["code"] == "run_in_use" and f"run {run_id} is in use: {use}" in error["message"], error


def test_members_and_viewers_see_model_ids_not_server_paths(lab, demo_assets):
    for name in ("viewer", "alice"):
        with client(lab, name) as caller:
            models = caller.get("/v1/models").json()["data"]
        assert {m["id"] for m in models} >= {f"run-{lab['runs']['full']}", f"run-{lab['runs']['full']}-base"}
        shown = json.dumps(models)
        assert str(lab["home"]) not in shown and str(demo_assets.model_dir) not in shown, shown
        fine_tune = next(m for m in models if m["id"] == f"run-{lab['runs']['full']}")
        assert fine_tune["root"] == fine_tune["id"]
    with client(lab) as admin:  # the server's own token still sees where the weights are
        models = admin.get("/v1/models").json()["data"]
    assert str(lab["home"] / "outputs" / "full-run") in json.dumps(models)


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/chat/completions", '{"model": "run-%d", "messages": [{"role": "user", "content": "hi \\ud800 there"}]}',
     "messages.0.content"),
    ("/v1/completions", '{"model": "run-%d", "prompt": "\\udfff", "max_tokens": 2}', "prompt"),
    ("/api/train/start", '{"model_name": "%d", "local_datasets": ["a\\ud83d.jsonl"]}', "local_datasets.0"),
])
def test_a_lone_surrogate_in_any_text_field_is_a_400_naming_it(lab, path, body, field):
    with client(lab, "alice") as alice:
        answer = alice.post(path, content=body % lab["runs"]["full"], headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_text" and error["field"] == field and "lone UTF-16 surrogate" in error["message"]
    if path.startswith("/v1/"):
        assert error["param"] == field and error["type"] == "invalid_request_error"


def test_a_surrogate_pair_is_text(lab):
    body = '{"model": "run-999999", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}'
    with client(lab, "alice") as alice:
        answer = alice.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found", answer.text


def test_a_run_being_exported_cannot_be_deleted(lab):
    run_id = lab["runs"]["adapter"]
    with ThreadPoolExecutor(1) as pool, client(lab, "alice") as alice:
        export = pool.submit(alice.post, f"/api/runs/{run_id}/export", json={"format": "merged", "dest": "merged"})
        merging = child_of(lab["server"], "tunelab.export.child", export)
        merging.suspend()
        try:
            refused_delete(lab, run_id, "an export is being written from it")
        finally:
            merging.kill()
        failed = export.result(timeout=CHILD_WAIT_S)
    assert failed.status_code == 500 and "killed by signal 9" in failed.json()["error"]["message"], failed.text
    with client(lab, "alice") as alice:
        assert alice.delete(f"/api/runs/{run_id}", params={"delete_artifacts": "true"}).status_code == 200
    assert not (lab["home"] / "outputs" / "adapter-run").exists()


def test_a_run_answering_cannot_be_deleted_and_its_idle_model_goes_with_it(lab):
    run_id = lab["runs"]["full"]
    ask = {"model": f"run-{run_id}", "messages": [{"role": "user", "content": "Add the two numbers."}], "max_tokens": 4}
    with ThreadPoolExecutor(1) as pool, client(lab, "alice") as alice:
        answer = pool.submit(alice.post, "/v1/chat/completions", json=ask)
        serving = child_of(lab["server"], "tunelab.inference.child", answer)
        serving.suspend()
        try:
            refused_delete(lab, run_id, "a chat or completion answer is being generated with it")
        finally:
            serving.resume()
        assert answer.result(timeout=CHILD_WAIT_S).status_code == 200
        assert alice.get("/api/inference").json()["model"] == f"run-{run_id}"  # loaded, idle

        deleted = alice.delete(f"/api/runs/{run_id}")
        assert deleted.status_code == 200, deleted.text
        assert alice.get("/api/inference").json()["model"] is None
        assert not serving.is_running() or serving.status() == psutil.STATUS_ZOMBIE
        gone = alice.post("/v1/chat/completions", json=ask)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found", gone.text
