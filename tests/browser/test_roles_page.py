"""The page as each role sees it, with named keys on a real server (one stand-in GPU, the
scripted trainer): the header says who is signed in; a viewer finds every control that
starts or changes work disabled, the reason on hover; a member finds Stop, Cancel, Delete
and the other run actions disabled on another member's runs and enabled on its own, and
priorities are an admin's. The server's own answers are checked beside the page's, so a
control the page disables is one the server refuses."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from fake_gpu import one_gpu_env
from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

pytestmark = [pytest.mark.browser]
KEY_ROLES = {"alice": "member", "bob": "member", "viewer": "viewer"}


@pytest.fixture
def server_env(tmp_path):
    return one_gpu_env(tmp_path, step_seconds=0.1)


@pytest.fixture
def keys(server) -> dict[str, str]:
    """A key per name in KEY_ROLES, created in the live server's store (it sees them at once)."""
    secrets = {name: new_secret() for name in KEY_ROLES}
    with Store(server.home / "tunelab.db") as store:
        for name, role in KEY_ROLES.items():
            store.add_api_key(name, role, secret_hash(secrets[name]))
    return secrets


def as_key(server, secret: str, method: str, path: str, **kwargs) -> httpx.Response:
    return httpx.request(method, server.url.rstrip("/") + path, headers={"Authorization": f"Bearer {secret}"},
                         timeout=30, **kwargs)


def run_body(demo_assets, name: str) -> dict:
    return {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "max_steps": 5000,
            "max_seq_length": 128, "batch_size": 2, "display_name": name}


def start_as(server, secret: str, body: dict) -> int:
    answer = as_key(server, secret, "POST", "/api/train/start", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()["job_id"]


def finished_run(server, owner: str, name: str) -> int:
    """A completed run owned by `owner`, written through the real store (no worker backs it)."""
    with Store(server.home / "tunelab.db") as store:
        run_id = store.create_run({"max_steps": 3}, "demo", "alpaca", display_name=name, owned_by=owner)
        store.finalize_run(run_id, status="completed", final_step=3, final_loss=1.5,
                           output_dir=str(server.home / "outputs" / name))
    return run_id


def test_a_viewer_sees_who_it_is_and_no_enabled_control_that_starts_or_changes_work(server, keys, open_page,
                                                                                      demo_assets, shoot):
    run_id = start_as(server, keys["alice"], run_body(demo_assets, "alice training"))
    finished_run(server, "alice", "alice done")
    page = open_page(token=keys["viewer"])

    expect(page.locator("#signed-in")).to_have_text("Signed in as viewer (viewer)")
    start = page.get_by_role("button", name="Start training")
    expect(start).to_be_disabled()
    expect(start).to_have_attribute("title", re.compile("only reads"))
    expect(page.get_by_role("button", name="Check dataset")).to_be_disabled()
    expect(page.locator("#chat-send")).to_be_disabled()  # the chat panel, hidden until a run is opened in it
    # The run training now is alice's: the viewer may watch it, not stop it.
    expect(page.locator("#run-name")).to_contain_text(f"#{run_id}")
    expect(page.locator("#stop-run")).to_have_attribute("title", re.compile("only reads"))
    expect(page.locator("#stop-run")).to_be_disabled()
    expect(page.get_by_role("button", name="Stop alice training")).to_be_disabled()
    for action in ("Rename", "Export", "Evaluate", "Delete"):
        control = page.get_by_role("button", name=f"{action} alice done")
        expect(control).to_be_disabled()
        expect(control).to_have_attribute("title", re.compile("viewer"))
    shoot(page, "roles-viewer")
    # What the page disables, the server refuses.
    assert as_key(server, keys["viewer"], "POST", "/api/train/start", json=run_body(demo_assets, "x")).status_code == 403
    assert as_key(server, keys["alice"], "POST", f"/api/runs/{run_id}/stop", json={"save": False}).status_code == 200


def test_a_member_manages_its_own_runs_only_and_priorities_are_an_admins(server, keys, open_page, demo_assets, shoot):
    alice_run = start_as(server, keys["alice"], run_body(demo_assets, "alice training"))
    bob_run = start_as(server, keys["bob"], run_body(demo_assets, "bob waiting"))  # the GPU is busy: it queues
    assert server.json("GET", f"/api/runs/{bob_run}")["status"] == "queued"
    page = open_page(token=keys["alice"])

    expect(page.locator("#signed-in")).to_have_text("Signed in as alice (member)")
    expect(page.get_by_role("button", name="Start training")).to_be_enabled()
    # Her own run: Stop, and in the history Rename and Delete.
    expect(page.get_by_role("button", name="Stop alice training")).to_be_enabled()
    expect(page.get_by_role("button", name="Delete alice training")).to_be_enabled()
    expect(page.get_by_role("button", name="Rename alice training")).to_be_enabled()
    # Bob's: nothing that changes it, each saying whose it is.
    for control in (page.get_by_role("button", name="Cancel bob waiting"),
                    page.get_by_role("button", name="Delete bob waiting"),
                    page.get_by_role("button", name="Rename bob waiting")):
        expect(control).to_be_disabled()
        expect(control).to_have_attribute("title", re.compile(f"run #{bob_run} belongs to the key 'bob'"))
    expect(page.get_by_role("button", name="Set the priority of bob waiting")).to_be_disabled()
    shoot(page, "roles-member-alice")

    bob = open_page(token=keys["bob"])
    expect(bob.locator("#signed-in")).to_have_text("Signed in as bob (member)")
    stop = bob.get_by_role("button", name="Stop alice training")
    expect(stop).to_be_disabled()
    expect(stop).to_have_attribute("title", re.compile("belongs to the key 'alice'"))
    expect(bob.get_by_role("button", name="Delete alice training")).to_be_disabled()
    expect(bob.get_by_role("spinbutton", name="Priority of bob waiting")).to_be_disabled()
    set_priority = bob.get_by_role("button", name="Set the priority of bob waiting")
    expect(set_priority).to_be_disabled()
    expect(set_priority).to_have_attribute("title", "only an admin sets priorities")
    # What the page offers works: bob cancels his own queued run from it (and says yes when asked).
    bob.once("dialog", lambda dialog: dialog.accept())
    bob.get_by_role("button", name="Cancel bob waiting").click()
    expect(bob.locator("#notices")).to_contain_text("Cancelled bob waiting")
    assert server.json("GET", f"/api/runs/{bob_run}")["status"] == "cancelled"
    # And what it withholds, the server refuses.
    assert as_key(server, keys["bob"], "POST", f"/api/runs/{alice_run}/stop", json={"save": False}).status_code == 403
    assert as_key(server, keys["alice"], "POST", f"/api/runs/{alice_run}/stop", json={"save": False}).status_code == 200


def test_the_servers_own_token_is_an_admin_offered_everything(server, keys, open_page, demo_assets):
    start_as(server, keys["alice"], run_body(demo_assets, "alice training"))
    start_as(server, keys["bob"], run_body(demo_assets, "bob waiting"))
    page = open_page()
    expect(page.locator("#signed-in")).to_have_text("Signed in as local (admin)")
    for name in ("Stop alice training", "Cancel bob waiting", "Set the priority of bob waiting", "Delete bob waiting"):
        control = page.get_by_role("button", name=name)
        expect(control).to_be_enabled()
        expect(control).not_to_have_attribute("title", re.compile("."))
    server.json("POST", "/api/train/stop", json={"save": False})
