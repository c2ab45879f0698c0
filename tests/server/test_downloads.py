"""Downloading a run's exports on a real server: one file whole and by byte range, the
folder as a zip whose entries are the files on disk, who may download (the run's owner
and admins; not another member, not a viewer), and no path leading out of a recorded
export folder (`..`, an absolute path, a symlink out, a folder that is no export of the run).

The runs and their export folders are written through the real store before the server
opens it; the files are plain bytes, since serving them does not depend on what they hold.
"""

from __future__ import annotations

import io
import os
import zipfile

import pytest

from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

ROLES = {"alice": "member", "bob": "member", "viewer": "viewer", "admin": "admin"}


@pytest.fixture
def lab(start_server, demo_run, tmp_path):
    """A server whose store holds alice's run 1 with an adapter export (one file in a
    subfolder) and bob's run 2 with its own; a secret file lies beside the outputs root."""
    home = tmp_path / "home"
    home.mkdir()
    outputs = home / "outputs"
    secrets = {}
    exports = {}
    with Store(home / "tunelab.db") as store:
        for name, role in ROLES.items():
            secrets[name] = new_secret()
            store.add_api_key(name, role, secret_hash(secrets[name]))
        for owner in ("alice", "bob"):
            run_id = store.create_run(demo_run(), "demo", "alpaca", owned_by=owner)
            folder = outputs / f"{owner}-run" / "export-adapter"
            (folder / "nested").mkdir(parents=True)
            (folder / "adapter_model.safetensors").write_bytes(os.urandom(300_000))
            (folder / "adapter_config.json").write_text('{"r": 8}')
            (folder / "nested" / "tokenizer.json").write_text("{}")
            store.record_export(folder, run_id, owner, "adapter")
            exports[owner] = (run_id, folder)
        # Alice's run speaks: two samples, a file of another name and a link out beside them.
        samples = outputs / "alice-run" / "samples"
        samples.mkdir()
        for step in (20, 40):
            (samples / f"step-{step}.wav").write_bytes(os.urandom(5000))
        (samples / "notes.wav").write_bytes(b"not a sample")
        (samples / "step-60.wav").symlink_to(tmp_path / "secret.txt")
        store.set_output_dir(exports["alice"][0], outputs / "alice-run")
    (tmp_path / "secret.txt").write_text("not for download")
    server = start_server(home=home)
    secrets["token"] = server.token
    clients = {name: server.client(token=secret) for name, secret in secrets.items()}
    yield clients, exports, tmp_path
    for client in clients.values():
        client.close()


def test_the_owner_lists_and_downloads_a_file_whole_and_by_range(lab):
    clients, exports, _ = lab
    run_id, folder = exports["alice"]
    listed = clients["alice"].get(f"/api/runs/{run_id}/exports").json()["exports"]
    assert [e["folder"] for e in listed] == [str(folder.resolve())]
    assert {f["path"]: f["size_bytes"] for f in listed[0]["files"]} == {
        "adapter_config.json": 8, "adapter_model.safetensors": 300_000, "nested/tokenizer.json": 2}
    on_disk = (folder / "adapter_model.safetensors").read_bytes()
    query = {"folder": listed[0]["folder"], "file": "adapter_model.safetensors"}
    whole = clients["alice"].get(f"/api/runs/{run_id}/exports/download", params=query)
    assert whole.status_code == 200 and whole.content == on_disk
    assert whole.headers["accept-ranges"] == "bytes"
    # A download cut off at 100,000 bytes resumes from there.
    rest = clients["alice"].get(f"/api/runs/{run_id}/exports/download", params=query, headers={"Range": "bytes=100000-"})
    assert rest.status_code == 206 and rest.content == on_disk[100_000:]
    assert rest.headers["content-range"] == f"bytes 100000-{len(on_disk) - 1}/{len(on_disk)}"


def test_the_folder_comes_as_a_zip_of_the_files_on_disk(lab):
    clients, exports, _ = lab
    run_id, folder = exports["alice"]
    answer = clients["admin"].get(f"/api/runs/{run_id}/exports/download", params={"folder": str(folder)})
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
        assert archive.testzip() is None
        got = {name: archive.read(name) for name in archive.namelist()}
    want = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert got == want


@pytest.mark.parametrize("caller", ["bob", "viewer"])
def test_another_member_and_a_viewer_are_refused(lab, caller):
    clients, exports, _ = lab
    run_id, folder = exports["alice"]
    answer = clients[caller].get(f"/api/runs/{run_id}/exports/download",
                                 params={"folder": str(folder), "file": "adapter_config.json"})
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == ("not_owner" if caller == "bob" else "role_forbidden")
    assert b'"r": 8' not in answer.content


def test_no_path_leads_out_of_a_recorded_export_folder(lab):
    clients, exports, tmp_path = lab
    alice = clients["alice"]
    run_id, folder = exports["alice"]
    (folder / "escape").symlink_to(tmp_path / "secret.txt")
    (folder / "escape-dir").symlink_to(tmp_path, target_is_directory=True)
    url = f"/api/runs/{run_id}/exports/download"
    for file in ("bad\x00name", "../../../secret.txt", str(tmp_path / "secret.txt"), "escape", "escape-dir/secret.txt",
                 "nested/../../../../secret.txt"):
        answer = alice.get(url, params={"folder": str(folder), "file": file})
        assert answer.status_code == 404, (file, answer.text)
        assert answer.json()["error"]["field"] == "file" and b"not for download" not in answer.content
    # Folders that are no export of this run: bob's, the run folder above, one reached by `..`.
    bob_folder = exports["bob"][1]
    for other in ("nul\x00folder", str(bob_folder), str(folder.parent), str(folder / ".." / ".." / "bob-run" / "export-adapter"),
                  str(tmp_path)):
        answer = alice.get(url, params={"folder": other, "file": "adapter_config.json"})
        assert answer.status_code == 404 and answer.json()["error"]["field"] == "folder", (other, answer.text)
    # The zip of the folder leaves the symlinks pointing out of it behind.
    answer = alice.get(url, params={"folder": str(folder)})
    assert b"not for download" not in answer.content
    with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
        assert sorted(archive.namelist()) == ["adapter_config.json", "adapter_model.safetensors", "nested/tokenizer.json"]


def test_a_runs_samples_come_one_by_range_or_all_as_a_zip(lab):
    clients, exports, _ = lab
    run_id, folder = exports["alice"]
    samples = folder.parent / "samples"
    viewer = clients["viewer"]  # samples are read like the rest of the run
    part = viewer.get(f"/api/runs/{run_id}/samples/step-20.wav", headers={"Range": "bytes=0-99"})
    assert part.status_code == 206 and part.content == (samples / "step-20.wav").read_bytes()[:100]
    answer = viewer.get(f"/api/runs/{run_id}/samples.zip")
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
        assert {n: archive.read(n) for n in archive.namelist()} == {
            n: (samples / n).read_bytes() for n in ("step-20.wav", "step-40.wav")}
    silent = viewer.get(f"/api/runs/{exports['bob'][0]}/samples.zip")
    assert silent.status_code == 404 and silent.json()["error"]["code"] == "sample_not_found"


def test_an_unknown_run_is_404(lab):
    clients, _, _ = lab
    answer = clients["token"].get("/api/runs/999/exports")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "run_not_found"
