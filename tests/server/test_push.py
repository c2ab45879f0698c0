"""Pushing runs to the Hub over HTTP, against a real server and the loopback Hub stand-in
(tests/hub_standin.py, reached through HF_ENDPOINT): the owner's push exports the run
and lands its files, card and plot in one new repo; a bad token or repo id is a 422
naming the field with nothing created on the Hub (and a bad repo id never reaches it);
another member's push is refused before anything happens; a commit the Hub refuses
leaves no repo behind. The token never shows in an answer, the store or the server's log.

The runs are written through the real store before the server opens it: a completed one
with an adapter in its folder (plain bytes: pushing does not read them) and a few
losses, and one that never finished.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from hub_standin import Account, HubStandIn
from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

HF_TOKEN = "hf_pushTestToken1234567890"
ROLES = {"alice": "member", "bob": "member"}


@pytest.fixture
def hub():
    standin = HubStandIn({HF_TOKEN: Account("alice", orgs=["lab"])}).start()
    yield standin
    standin.stop()


@pytest.fixture
def lab(start_server, demo_run, hub, tmp_path):
    """A server whose store holds alice's completed run 1 (an adapter in its folder, not
    exported yet); keys for alice and bob, both members."""
    home = tmp_path / "home"
    home.mkdir()
    secrets = {}
    with Store(home / "tunelab.db") as store:
        for name, role in ROLES.items():
            secrets[name] = new_secret()
            store.add_api_key(name, role, secret_hash(secrets[name]))
        run_id = store.create_run(demo_run(), "demo", "alpaca", owned_by="alice")
        folder = home / "outputs" / "alice-run"
        folder.mkdir(parents=True)
        (folder / "adapter_model.safetensors").write_bytes(os.urandom(200_000))
        (folder / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16}')
        (folder / "tokenizer.json").write_text('{"model": {}}')
        store.add_metrics(run_id, [{"step": s, "loss": 3.0 / s} for s in range(1, 6)])
        store.finalize_run(run_id, status="completed", final_step=5, total_steps=5, final_loss=0.6, output_dir=str(folder))
        # Run 2 never finished (the server, starting, records it as ended in error): nothing to export.
        store.create_run(demo_run(), "demo", "alpaca", owned_by="alice")
    server = start_server(home=home, extra_env=hub.env())
    clients = {name: server.client(token=secret) for name, secret in secrets.items()}
    yield clients, run_id, home
    for client in clients.values():
        client.close()


def everything_under(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())


def test_the_owner_pushes_an_export_with_its_card_in_one_new_repo(lab, hub):
    clients, run_id, home = lab
    answer = clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": "alice/my-lora", "token": HF_TOKEN,
                                                                     "private": True})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["created"] and body["exported_now"] and body["format"] == "adapter"
    repo = hub.repos["alice/my-lora"]
    assert repo.private and len(repo.commits) == 1
    folder = Path(body["export_folder"])
    assert folder == home.resolve() / "outputs" / "alice-run" / "export-adapter"
    on_disk = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "tunelab-export.json"}
    assert set(on_disk) == {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"}
    assert {name: repo.files[name] for name in on_disk} == on_disk
    assert set(repo.files) == set(on_disk) | {"README.md", "training_loss.png"} == set(body["files"])
    # The big file went by LFS, uploaded before the commit named it.
    assert ("PUT", f"/lfs-upload/{hashlib.sha256(on_disk['adapter_model.safetensors']).hexdigest()}") in hub.requests
    card = repo.files["README.md"].decode()
    meta = yaml.safe_load(card.split("---\n")[1])
    assert meta["library_name"] == "peft" and "tunelab" in meta["tags"]
    assert "base_model" not in meta  # the demo model is a local folder, not a Hub id
    assert "final training loss | 0.6" in card and "learning_rate" in card and "![Training loss](training_loss.png)" in card
    assert str(home) not in card and HF_TOKEN not in card
    assert repo.files["training_loss.png"].startswith(b"\x89PNG")
    # The export is recorded like any other, and the token is nowhere.
    listed = clients["alice"].get(f"/api/runs/{run_id}/exports").json()["exports"]
    assert [e["folder"] for e in listed] == [str(folder)]
    assert HF_TOKEN not in answer.text and HF_TOKEN.encode() not in everything_under(home)


def test_a_bad_token_is_a_422_naming_token_and_nothing_reaches_the_hub(lab, hub):
    clients, run_id, home = lab
    answer = clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": "alice/my-lora", "token": "hf_wrongToken999"})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "token" and "refused the token" in error["message"]
    assert hub.repos == {} and hub.blobs == {}
    assert [path for _, path in hub.requests] == ["/api/whoami-v2"]
    # Refused before exporting: the run folder holds no export.
    assert not (home / "outputs" / "alice-run" / "export-adapter").exists()
    assert b"hf_wrongToken999" not in everything_under(home)
    # No token at all: the same field, before any network call.
    missing = clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": "alice/my-lora"})
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "token"
    assert len(hub.requests) == 1


@pytest.mark.parametrize("repo_id", ["my-lora", "alice/", "/x", "alice/my lora", "alice/a/b", "alice/x--y", "a" * 50 + "/" + "b" * 50])
def test_a_bad_repo_id_is_refused_before_any_network_call(lab, hub, repo_id):
    clients, run_id, _ = lab
    answer = clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": repo_id, "token": HF_TOKEN})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "repo_id" and "owner/name" in answer.json()["error"]["message"]
    assert hub.requests == []


def test_a_repo_outside_the_tokens_namespaces_is_refused_naming_repo_id(lab, hub):
    clients, run_id, _ = lab
    answer = clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": "someone-else/x", "token": HF_TOKEN})
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "repo_id", answer.text
    assert hub.repos == {}


def test_another_member_cannot_push_the_run(lab, hub):
    clients, run_id, home = lab
    answer = clients["bob"].post(f"/api/runs/{run_id}/push", json={"repo_id": "alice/stolen", "token": HF_TOKEN})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "not_owner", answer.text
    assert hub.requests == [] and not (home / "outputs" / "alice-run" / "export-adapter").exists()


def test_a_refused_commit_leaves_no_repo_and_an_existing_repo_untouched(lab, hub):
    clients, run_id, _ = lab
    hub.fail_commits = 500
    answer = clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": "lab/new-one", "token": HF_TOKEN})
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "hub_failed", answer.text
    assert "lab/new-one" not in hub.repos  # created, then deleted again when the commit failed
    assert ("DELETE", "/api/repos/delete") in hub.requests
    # A repo that existed keeps what it had.
    hub.fail_commits = None
    assert clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": "lab/kept", "token": HF_TOKEN}).status_code == 200
    before = dict(hub.repos["lab/kept"].files)
    hub.fail_commits = 403
    refused = clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": "lab/kept", "token": HF_TOKEN})
    assert refused.status_code == 409 and refused.json()["error"]["field"] == "repo_id", refused.text
    assert hub.repos["lab/kept"].files == before and len(hub.repos["lab/kept"].commits) == 1
    # With the Hub willing again, a second push is a new commit on the existing repo.
    hub.fail_commits = None
    again = clients["alice"].post(f"/api/runs/{run_id}/push", json={"repo_id": "lab/kept", "token": HF_TOKEN}).json()
    assert again["created"] is False and again["exported_now"] is False and len(hub.repos["lab/kept"].commits) == 2


def test_a_run_with_nothing_to_export_is_refused_as_export_refuses_it_with_no_repo_made(lab, hub):
    clients, _, _ = lab
    answer = clients["alice"].post("/api/runs/2/push", json={"repo_id": "alice/unfinished", "token": HF_TOKEN})
    assert answer.status_code == 409 and answer.json()["error"]["code"] == "not_exportable", answer.text
    assert "no finished weights to export" in answer.json()["error"]["message"]
    assert hub.repos == {} and [path for _, path in hub.requests] == ["/api/whoami-v2"]
