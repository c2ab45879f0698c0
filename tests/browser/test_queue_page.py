"""The page's "Active and queued runs" with a real server on one (stand-in) GPU: the run
training there is listed with its devices and a Stop button, the runs waiting for it with
their positions; a queued run moves down and is cancelled from the page, the active one is
stopped from it (each after a confirmation: dismissed, the run is left alone), and the
history shows each run's owner column."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from fake_gpu import one_gpu_env

pytestmark = [pytest.mark.browser]


@pytest.fixture
def server_env(tmp_path):
    return one_gpu_env(tmp_path, step_seconds=0.1)


def start(server, demo_run_body, **overrides) -> dict:
    return server.json("POST", "/api/train/start", json={**demo_run_body, **overrides})


def test_queued_runs_are_listed_moved_and_cancelled_and_the_active_one_stopped(server, open_page, demo_assets, shoot,
                                                                             fill_demo_config):
    body = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "max_steps": 5000,
            "max_seq_length": 128, "batch_size": 2}
    busy = start(server, body, display_name="busy one")
    first = start(server, body, display_name="first waiting")
    assert busy["status"] == "running" and first["status"] == "queued"

    # A start from the page while the GPU is busy says where it waits.
    page = open_page()
    # Stop and Cancel ask first (window.confirm): answered as `accept` says, each question kept.
    asked: list[str] = []
    accept = {"now": False}

    def answer(dialog) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept["now"] else dialog.dismiss()

    page.on("dialog", answer)

    def questions(count: int) -> list[str]:
        # The dialog handler runs as Playwright delivers the event: wait (bounded) until it has.
        for _ in range(200):
            if len(asked) >= count:
                break
            page.wait_for_timeout(50)
        return asked
    fill_demo_config(page, max_steps=5000, name="second waiting")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#notices")).to_contain_text("waits for its devices: position 2 in the queue")
    waiting = server.json("GET", "/api/queue")["queued"]
    second = {"job_id": next(q["id"] for q in waiting if q["display_name"] == "second waiting")}
    rows = page.locator("#queue-list > li")
    expect(rows).to_have_count(3)
    active = rows.nth(0)
    expect(active).to_contain_text("busy one")
    expect(active).to_contain_text("gpu-0")
    expect(rows.nth(1)).to_contain_text("first waiting")
    expect(rows.nth(1)).to_contain_text("1 of 2")
    expect(rows.nth(2)).to_contain_text("2 of 2")
    expect(page.get_by_role("button", name="Move first waiting up")).to_be_disabled()
    shoot(page, "queue-1-listed")

    page.get_by_role("button", name="Move first waiting down").click()
    expect(rows.nth(1)).to_contain_text("second waiting")
    expect(rows.nth(2)).to_contain_text("first waiting")
    assert [r["id"] for r in server.json("GET", "/api/queue")["queued"]] == [second["job_id"], first["job_id"]]

    # Dismissed: the run stays queued, where it was.
    page.get_by_role("button", name="Cancel second waiting").click()
    assert questions(1) == ["Cancel second waiting? It leaves the queue and will not start."]
    expect(rows).to_have_count(3)
    assert server.json("GET", f"/api/runs/{second['job_id']}")["status"] == "queued"
    page.get_by_role("button", name="Stop busy one").click()
    assert questions(2)[-1].startswith("Stop busy one? It stops at its next step")
    assert server.json("GET", f"/api/runs/{busy['job_id']}")["status"] == "running"

    accept["now"] = True
    page.get_by_role("button", name="Cancel second waiting").click()
    expect(rows).to_have_count(2)
    expect(rows.nth(1)).to_contain_text("1 of 1")
    assert server.json("GET", f"/api/runs/{second['job_id']}")["status"] == "cancelled"

    page.get_by_role("button", name="Stop busy one").click()
    # The GPU frees: the last queued run starts on it and leads the list as the active one.
    expect(rows).to_have_count(1, timeout=60_000)
    expect(rows.nth(0)).to_contain_text("first waiting", timeout=60_000)
    expect(rows.nth(0)).to_contain_text("gpu-0")
    assert server.json("GET", f"/api/runs/{busy['job_id']}")["status"] == "stopped"

    history = page.locator("#runs-list")
    expect(history.locator(f"li[data-run-id='{second['job_id']}']")).to_contain_text("cancelled")
    expect(history.locator("li").first.locator("dt", has_text="Owner")).to_have_count(1)
    page.get_by_role("button", name="Stop first waiting").click()
    expect(page.locator("#queue-empty")).to_be_visible(timeout=60_000)
    shoot(page, "queue-2-emptied")
