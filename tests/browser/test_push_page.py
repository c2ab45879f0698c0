"""The Export dialog's push to the Hugging Face Hub, in Chromium against a real server and
the loopback Hub stand-in (tests/hub_standin.py, reached through HF_ENDPOINT): a refused
token shows an error naming the token field and leaves the Hub empty; then the push
exports the run and lands the export's files (byte for byte the files on disk), the
model card and the loss plot in one new private repo, and the page links to it. The
token goes only in the request body: never in a URL, never in the page's storage.

The run is written through the real store before the server opens it: a completed LoRA
run with an adapter in its folder (plain bytes: pushing does not read them).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import expect

from hub_standin import Account, HubStandIn
from tunelab.store import Store

pytestmark = [pytest.mark.browser]
HF_TOKEN = "hf_pagePushToken5555555555"


@pytest.fixture
def hub():
    standin = HubStandIn({HF_TOKEN: Account("alice")}).start()
    yield standin
    standin.stop()


@pytest.fixture
def run_folder(home: Path, demo_assets) -> Path:
    folder = home / "outputs" / "page-run"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(os.urandom(150_000))
    (folder / "adapter_config.json").write_text('{"r": 8}')
    with Store(home / "tunelab.db") as store:
        config = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
                  "training_type": "lora", "lora_r": 8, "learning_rate": 0.002, "max_steps": 4}
        run_id = store.create_run(config, "demo", "alpaca")
        store.add_metrics(run_id, [{"step": s, "loss": 2.5 / s} for s in range(1, 5)])
        store.finalize_run(run_id, status="completed", final_step=4, total_steps=4, final_loss=0.625, output_dir=str(folder))
    return folder


@pytest.fixture
def server_env(hub, run_folder) -> dict[str, str]:
    return hub.env()


def test_the_export_dialog_pushes_the_run_with_its_card(server, open_page, hub, run_folder, shoot):
    page = open_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    row = page.locator('#runs-list li[data-run-id="1"]')
    row.get_by_role("button", name="Export Run #1").click()
    dialog = page.get_by_role("dialog", name="Export Run #1")
    dialog.get_by_label("Repo id").fill("alice/page-lora")

    dialog.get_by_label("Hugging Face token").fill("hf_notTheRightOne")
    dialog.get_by_role("button", name="Push to the Hub").click()
    expect(dialog.locator("#push-error")).to_contain_text("token: the Hub at")
    expect(dialog.locator("#push-error")).to_contain_text("refused the token")
    expect(dialog.get_by_label("Hugging Face token")).to_have_attribute("aria-invalid", "true")
    assert hub.repos == {} and not (run_folder / "export-adapter").exists()

    dialog.get_by_label("Hugging Face token").fill(HF_TOKEN)
    dialog.get_by_label("Private repo").check()
    dialog.get_by_role("button", name="Push to the Hub").click()
    done = dialog.locator(".push-done")
    expect(done).to_contain_text("Pushed adapter to a new repo", timeout=60_000)
    expect(done.get_by_role("link")).to_have_attribute("href", f"{hub.url}/alice/page-lora")
    expect(dialog.get_by_label("Hugging Face token")).to_have_value("")
    # The export the push wrote is offered for download at once.
    expect(dialog.locator('.export-download[data-format="adapter"]')).to_be_visible()
    shoot(page, "push-dialog")

    repo = hub.repos["alice/page-lora"]
    assert repo.private and len(repo.commits) == 1
    folder = run_folder / "export-adapter"
    on_disk = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "tunelab-export.json"}
    assert set(on_disk) == {"adapter_model.safetensors", "adapter_config.json"}
    assert {name: repo.files[name] for name in on_disk} == on_disk
    assert set(repo.files) == set(on_disk) | {"README.md", "training_loss.png"}
    card = repo.files["README.md"].decode()
    assert "library_name: peft" in card and "| final training loss | 0.625 |" in card
    assert repo.files["training_loss.png"].startswith(b"\x89PNG")
    # The token went in bodies only, and the page kept it nowhere.
    assert urls and not [u for u in urls if "hf_" in u]
    stored = page.evaluate("() => JSON.stringify({...localStorage}) + JSON.stringify({...sessionStorage})")
    assert HF_TOKEN not in stored
