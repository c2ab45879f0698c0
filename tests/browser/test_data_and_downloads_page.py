"""Bringing data in and taking the model away, on the page, with a real server and a real
training worker: upload a JSONL file, pick it from the data picker, check it, train a
two-step LoRA run on it, export the adapter and a GGUF, and download a file of each and
the adapter's whole folder from the Export dialog, byte for byte the files on disk. A
member downloads its own run's export from the page and cannot download another
member's, on the page or through the API. An upload over the server's bound is refused
on the page, and nothing of it reaches the datasets folder."""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

RUN_MS = 240_000
LIMIT_MB = "0.02"  # about 20 KiB: the test's data fits, the "big" file does not


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"TUNELAB_UPLOAD_MAX_MB": LIMIT_MB}


def uploaded_rows(demo_assets) -> list[dict]:
    """Rows of the demo alpaca data, renamed so the upload is plainly its own file."""
    rows = [json.loads(line) for line in demo_assets.alpaca.read_text().splitlines() if line.strip()]
    return rows[:12]


def test_upload_pick_check_train_export_and_download(server, open_page, demo_assets, fill_demo_config, tmp_path):
    rows = uploaded_rows(demo_assets)
    source = tmp_path / "my-upload.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows))
    saved = server.home / "datasets" / "my-upload.jsonl"

    page = open_page()
    page.get_by_label("Model", exact=True).fill(str(demo_assets.model_dir))
    page.set_input_files("#data-upload", str(source))
    # The uploaded file is picked at once; the picker lists it with its rows.
    expect(page.get_by_label("Data files")).to_have_value(str(saved))
    assert saved.read_bytes() == source.read_bytes()
    picker = page.get_by_label("Pick a data file")
    expect(picker.locator(f'option[value="{saved}"]')).to_contain_text(f"{len(rows)} rows")
    # Picked again from the list into an empty field.
    page.get_by_label("Data files").fill("")
    picker.select_option(str(demo_assets.alpaca))
    picker.select_option(str(saved))
    expect(page.get_by_label("Data files")).to_have_value(f"{demo_assets.alpaca}\n{saved}")
    page.get_by_label("Data files").fill(str(saved))
    page.get_by_role("button", name="Check dataset").click()
    expect(page.locator("#preview-format")).to_have_text("alpaca", timeout=RUN_MS)
    expect(page.locator("#preview-rows")).to_have_text(str(len(rows)))

    fill_demo_config(page, max_steps=2, data=saved)
    page.get_by_role("button", name="Start training").click()
    server.wait_for(lambda s: s.get("phase") == "completed", "the run on the uploaded data to complete", timeout=RUN_MS / 1000)
    run = server.json("GET", "/api/runs/1")
    assert run["config"]["local_datasets"] == [str(saved)]

    row = page.locator('#runs-list li[data-run-id="1"]')
    expect(row).to_be_visible(timeout=RUN_MS)
    row.get_by_role("button", name="Export Run #1").click()
    dialog = page.get_by_role("dialog", name="Export Run #1")
    expect(dialog.get_by_text("No exports yet.")).to_be_visible()
    dialog.get_by_label("Format").select_option("adapter")
    dialog.get_by_role("button", name="Export", exact=True).click()
    expect(dialog.locator(".export-done")).to_contain_text("Exported adapter", timeout=RUN_MS)
    dest = Path(run["output_dir"]) / "export-adapter"
    weights = dialog.get_by_role("button", name="Download adapter_model.safetensors")
    expect(weights).to_be_enabled()
    with page.expect_download() as info:
        weights.click()
    assert Path(info.value.path()).read_bytes() == (dest / "adapter_model.safetensors").read_bytes()
    assert info.value.suggested_filename == "adapter_model.safetensors"

    with page.expect_download() as info:
        dialog.get_by_role("button", name="Download all (.zip)").click()
    with zipfile.ZipFile(io.BytesIO(Path(info.value.path()).read_bytes())) as archive:
        got = {name: archive.read(name) for name in archive.namelist()}
    assert got == {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert "adapter_model.safetensors" in got

    # A GGUF of the same run (llama.cpp's converter, on the CPU), listed beside the adapter.
    dialog.get_by_label("Format").select_option("gguf")
    dialog.get_by_role("button", name="Export", exact=True).click()
    expect(dialog.locator(".export-done")).to_contain_text("Exported gguf (float16)", timeout=RUN_MS)
    gguf = Path(run["output_dir"]) / "export-gguf" / "model-f16.gguf"
    button = dialog.locator('.export-download[data-format="gguf"]').get_by_role("button", name="Download model-f16.gguf")
    expect(button).to_be_enabled()
    with page.expect_download() as info:
        button.click()
    downloaded = Path(info.value.path()).read_bytes()
    assert downloaded[:4] == b"GGUF" and downloaded == gguf.read_bytes()
    assert info.value.suggested_filename == "model-f16.gguf"


def member_runs_with_exports(server) -> tuple[dict[str, str], dict[str, tuple[int, Path]]]:
    """Keys for the members alice and bob, and a completed run of each with an adapter
    export, written through the live server's store (the bytes are random: serving a
    file does not depend on what it holds)."""
    secrets, runs = {}, {}
    with Store(server.home / "tunelab.db") as store:
        for owner in ("alice", "bob"):
            secrets[owner] = new_secret()
            store.add_api_key(owner, "member", secret_hash(secrets[owner]))
            run_dir = server.home / "outputs" / f"{owner}-run"
            run_id = store.create_run({"max_steps": 3}, "demo", "alpaca", display_name=f"{owner} done", owned_by=owner)
            store.finalize_run(run_id, status="completed", final_step=3, final_loss=1.5, output_dir=str(run_dir))
            folder = run_dir / "export-adapter"
            folder.mkdir(parents=True)
            (folder / "adapter_model.safetensors").write_bytes(os.urandom(200_000))
            (folder / "adapter_config.json").write_text('{"r": 8}')
            store.record_export(folder, run_id, owner, "adapter")
            runs[owner] = (run_id, folder)
    return secrets, runs


def test_a_member_downloads_its_own_export_and_not_another_members(server, open_page):
    secrets, runs = member_runs_with_exports(server)
    alice_run, alice_folder = runs["alice"]
    weights = alice_folder / "adapter_model.safetensors"

    page = open_page(token=secrets["alice"])
    page.get_by_role("button", name="Export alice done").click()
    dialog = page.get_by_role("dialog", name="Export alice done")
    with page.expect_download() as info:
        dialog.get_by_role("button", name="Download adapter_model.safetensors").click()
    assert Path(info.value.path()).read_bytes() == weights.read_bytes()

    bob = open_page(token=secrets["bob"])
    export = bob.get_by_role("button", name="Export alice done")
    expect(export).to_be_disabled()
    expect(export).to_have_attribute("title", re.compile(f"run #{alice_run} belongs to the key 'alice'"))
    expect(bob.get_by_role("button", name="Export bob done")).to_be_enabled()
    # The page's own download call, made with bob's key past the disabled button: refused.
    answer = bob.evaluate("""async ([run, folder]) => {
        const { api } = await import("/js/api.js");
        try { await api.exportBlob(run, folder, "adapter_model.safetensors"); return { ok: true }; }
        catch (err) { return { ok: false, status: err.status, message: err.message }; }
    }""", [alice_run, str(alice_folder)])
    assert answer["ok"] is False and answer["status"] == 403, answer
    assert "belongs to the key 'alice'" in answer["message"]
    for whole in (False, True):  # one file, and the folder as a zip
        refused = httpx.get(f"{server.url.rstrip('/')}/api/runs/{alice_run}/exports/download", timeout=30,
                            headers={"Authorization": f"Bearer {secrets['bob']}"},
                            params={"folder": str(alice_folder), **({} if whole else {"file": "adapter_model.safetensors"})})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_owner"
        assert weights.read_bytes()[:1000] not in refused.content


def test_an_upload_over_the_bound_is_refused_on_the_page(server, open_page, tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"text": "x" * 40_000}) + "\n")
    page = open_page()
    expect(page.locator("#data-picker-note")).to_contain_text("at most 20 KB")
    page.set_input_files("#data-upload", str(big))
    expect(page.locator("#data-picker-note")).to_contain_text("accepts uploads up to 20 KB")
    # Sent anyway, past the page's own check: the server refuses it, naming the bound.
    answer = server.api("POST", "/api/datasets/upload", params={"name": "big.jsonl"}, content=big.read_bytes())
    assert answer.status_code == 413 and "TUNELAB_UPLOAD_MAX_MB" in answer.json()["error"]["message"]
    folder = server.home / "datasets"
    assert not folder.exists() or list(folder.iterdir()) == []
