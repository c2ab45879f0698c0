"""The run panel follows the run that trains, over one progress stream, and no URL the page
asks for carries the token. With a real server on one (stand-in) GPU, a run trains while two
more are queued from the page and one is cancelled from the queue panel; then the run ends
and the last queued run is cancelled. On two GPUs, a run ends while another trains on (the
page once reopened the ended run's stream in a loop, hundreds of times), and ▶ on the other
one's row brings its live charts into the panel. Every request the page makes is recorded."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from fake_gpu import one_gpu_env

pytestmark = [pytest.mark.browser]

RUN_START_MS = 60_000
# Stream connections the panel may make for the one run it shows: the first, and a
# reconnect or two should the machine stall; a storm is dozens.
MOST_STREAMS_PER_VIEW = 3


@pytest.fixture
def gpus() -> int:
    return 1


@pytest.fixture
def server_env(tmp_path, gpus):
    return one_gpu_env(tmp_path, step_seconds=0.1, gpus=gpus)


def loss_points(page) -> int:
    return int(page.get_attribute("#chart-loss", "data-points"))


def expect_growing(page) -> None:
    """The loss chart gets more points while we watch: the stream still feeds it."""
    seen = loss_points(page)
    page.wait_for_function(f"Number(document.querySelector('#chart-loss').dataset.points) > {seen + 3}",
                           timeout=RUN_START_MS)


def queue_from_page(page, fill_demo_config, name: str, position: int) -> None:
    fill_demo_config(page, max_steps=5000, name=name)
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#notices")).to_contain_text(f"waits for its devices: position {position} in the queue")


def test_the_panel_keeps_the_training_run_live_while_runs_queue_end_and_are_cancelled(server, open_page,
                                                                                    fill_demo_config, shoot):
    page = open_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    fill_demo_config(page, max_steps=5000, name="trains")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#run-phase")).to_have_text("training", timeout=RUN_START_MS)
    first = server.json("GET", "/api/train/status")["run_id"]
    panel = page.locator("#current-run")
    expect(panel).to_have_attribute("data-run-id", str(first))
    expect_growing(page)

    # Two more from the page wait for the GPU: the queue panel lists them, the run panel
    # stays on the run that trains and its chart keeps growing.
    queue_from_page(page, fill_demo_config, "waits one", 1)
    queue_from_page(page, fill_demo_config, "waits two", 2)
    rows = page.locator("#queue-list > li")
    expect(rows).to_have_count(3)
    expect(panel).to_have_attribute("data-run-id", str(first))
    expect(page.locator("#run-phase")).to_have_text("training")
    expect(page.locator("#run-name")).to_contain_text("trains")
    expect_growing(page)
    shoot(page, "follows-1-queued")

    # Cancelling a queued run from the queue panel (it asks first) leaves the run panel alone.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel waits one").click()
    expect(rows).to_have_count(2)
    expect(panel).to_have_attribute("data-run-id", str(first))
    expect_growing(page)
    # ▶ on the training row shows that run (it never left): same run, still live.
    page.get_by_role("button", name="Watch trains in the run panel").click()
    expect(panel).to_have_attribute("data-run-id", str(first))
    expect_growing(page)

    # The run ends and the last queued run is cancelled at once: the panel shows the run
    # ended, and nothing reconnects in a loop.
    waiting = server.json("GET", "/api/queue")["queued"]
    assert [run["display_name"] for run in waiting] == ["waits two"]
    server.json("POST", f"/api/runs/{waiting[0]['id']}/stop", json={"save": True})
    server.json("POST", f"/api/runs/{first}/stop", json={"save": True})
    expect(page.locator("#run-phase")).to_have_text("stopped", timeout=RUN_START_MS)
    expect(page.locator("#run-steps")).not_to_contain_text("Preparing")
    expect(page.locator("#queue-empty")).to_be_visible(timeout=RUN_START_MS)
    expect(panel).to_have_attribute("data-run-id", str(first))
    expect(page.locator("#stream-state")).to_be_empty()
    # Long enough for the idle poll (5 s) to come round twice: a loop would show by then.
    page.wait_for_timeout(11_000)
    shoot(page, "follows-2-ended")

    assert not [url for url in urls if server.token in url], "the token travelled in a URL"
    streams = [url for url in urls if "/progress" in url]
    assert 1 <= len(streams) <= MOST_STREAMS_PER_VIEW, streams
    assert all(f"/api/runs/{first}/progress?ticket=tlt_" in url for url in streams), streams
    assert len([url for url in urls if url.endswith("/api/stream-tickets")]) == len(streams)


def test_reconnects_back_off_doubling_with_jitter_up_to_a_cap(server, open_page):
    page = open_page()
    waits = page.evaluate("""async () => {
        const { backoffMs, BACKOFF_MS } = await import("/js/progress-stream.js");
        const at = (random) => Array.from({ length: 10 }, (_, failures) => backoffMs(failures, () => random));
        return { low: at(0), high: at(1), cap: BACKOFF_MS.max, first: BACKOFF_MS.first };
    }""")
    for failures, (low, high) in enumerate(zip(waits["low"], waits["high"])):
        ceiling = min(waits["cap"], waits["first"] * 2**failures)
        assert (low, high) == (ceiling / 2, ceiling), failures
    assert waits["high"][-1] == waits["cap"]


@pytest.mark.parametrize("gpus", [2])  # one for each run at once
def test_a_run_that_ends_beside_one_still_training_is_not_reopened_and_play_shows_the_other(
        gpus, server, open_page, demo_assets, fill_demo_config, shoot):
    body = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "max_steps": 5000,
            "max_seq_length": 128, "batch_size": 2, "display_name": "long one"}
    long_run = server.json("POST", "/api/train/start", json=body)["job_id"]
    page = open_page()
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    # A short run from the page trains on the other GPU; the panel follows it to its end...
    fill_demo_config(page, max_steps=30, name="short one")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#notices")).to_contain_text("Started run")
    short_run = server.json("GET", "/api/train/status")["run_id"]
    assert short_run != long_run
    panel = page.locator("#current-run")
    expect(panel).to_have_attribute("data-run-id", str(short_run))
    expect(page.locator("#run-phase")).to_have_text("completed", timeout=RUN_START_MS)
    # ...and, with the long run still training, shows it ended without reconnecting to it.
    page.wait_for_timeout(11_000)
    expect(page.locator("#run-phase")).to_have_text("completed")
    expect(page.get_by_role("button", name="Stop…")).to_be_disabled()
    assert server.json("GET", f"/api/runs/{long_run}/status")["phase"] == "training"

    # ▶ on the long run's row brings its live view into the panel.
    page.get_by_role("button", name="Watch long one in the run panel").click()
    expect(panel).to_have_attribute("data-run-id", str(long_run))
    expect(page.locator("#run-phase")).to_have_text("training")
    expect_growing(page)
    shoot(page, "follows-3-watched")
    server.json("POST", f"/api/runs/{long_run}/stop", json={"save": True})
    expect(page.locator("#run-phase")).to_have_text("stopped", timeout=RUN_START_MS)

    assert not [url for url in urls if server.token in url], "the token travelled in a URL"
    for run_id in (short_run, long_run):
        streams = [url for url in urls if f"/api/runs/{run_id}/progress?" in url]
        assert 1 <= len(streams) <= MOST_STREAMS_PER_VIEW, (run_id, streams)
    # Every ticket fetched opened a stream, and every stream went in with a ticket fetched
    # for it (a browser may offer a spent one once more as a stream closes: the server refuses it).
    progress = [url for url in urls if "/progress" in url]
    tickets = [u for u in urls if u.endswith("/stream-tickets")]
    used = {url.split("ticket=")[1].split("&")[0] for url in progress}
    assert len(used) == len(tickets), (progress, tickets)
