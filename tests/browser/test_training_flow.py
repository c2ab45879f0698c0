"""The page end to end with a real server and real training workers: configure and
start the demo run, watch the loss chart grow, stop and save, resume, cancel, find both
runs in the history, compare them, rename one and delete them (with and without files);
and a run that fails in its worker shows why."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_START_MS = 120_000


def chart_points(page, chart: str = "loss") -> int:
    return int(page.get_attribute(f"#chart-{chart}", "data-points"))


def wait_points(page, at_least: int, chart: str = "loss") -> None:
    page.wait_for_function(
        f"Number(document.querySelector('#chart-{chart}').dataset.points) >= {at_least}", timeout=RUN_START_MS)


def stop_through_dialog(page, choice: str) -> None:
    page.get_by_role("button", name="Stop…").click()
    dialog = page.get_by_role("dialog", name="Stop this run?")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=choice).click()
    expect(page.locator("#run-phase")).to_have_text("stopped", timeout=RUN_START_MS)


def loss_steps(run: dict) -> list[int]:
    return [s for s, loss in zip(run["metrics"]["steps"], run["metrics"]["loss"]) if loss is not None]


def test_train_stop_resume_compare_and_manage_history(server, open_page, fill_demo_config, shoot):
    page = open_page()
    fill_demo_config(page, name="first try")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#run-phase")).to_have_text("training", timeout=RUN_START_MS)
    wait_points(page, 5)
    seen = chart_points(page)
    wait_points(page, seen + 5)  # the chart grows while we watch, fed by the stream
    expect(page.locator("#run-steps")).to_contain_text("of 2,000")
    expect(page.locator("#run-modality")).to_have_text("text")  # what the worker said it trains on
    shoot(page, "flow-1-training")

    # Stop and save: the dialog says what each choice means before anything happens.
    page.get_by_role("button", name="Stop…").click()
    dialog = page.get_by_role("dialog", name="Stop this run?")
    expect(dialog).to_contain_text("resume it later")
    expect(dialog).to_contain_text("cannot be resumed")
    shoot(page, "flow-2-stop-dialog")
    dialog.get_by_role("button", name="Stop and save").click()
    expect(page.locator("#run-phase")).to_have_text("stopped", timeout=RUN_START_MS)
    first = server.json("GET", "/api/runs/1")
    assert first["status"] == "stopped" and first["can_resume"], first
    expect(page.locator("#chart-loss")).to_have_attribute("data-points", str(len(loss_steps(first))))
    # What TRL logs beyond the fixed numbers gets a chart of its own, one series at a time.
    page.get_by_label("Other metric").select_option("mean_token_accuracy")
    accuracy = first["metrics"]["extra"]["mean_token_accuracy"]
    expect(page.locator("#chart-extra")).to_have_attribute("data-points", str(len(accuracy["steps"])))
    expect(page.locator("#chart-extra")).to_have_attribute("data-last-step", str(accuracy["steps"][-1]))

    # Resume from the history: a new run continues the step count of the first.
    row1 = page.locator('#runs-list li[data-run-id="1"]')
    expect(row1.locator(".badge")).to_have_text("stopped")
    row1.get_by_role("button", name="Resume first try").click()
    expect(page.locator("#run-name")).to_contain_text("#2", timeout=RUN_START_MS)
    expect(page.locator("#run-phase")).to_have_text("training", timeout=RUN_START_MS)
    # Its chart begins with the first run's steps (marked) and grows past them.
    expect(page.locator("#chart-loss")).to_have_attribute("data-markers", f"resumed from Run #1 at step {first['final_step']}")
    page.wait_for_function(
        f"Number(document.querySelector('#chart-loss').dataset.lastStep) > {first['final_step']}", timeout=RUN_START_MS)
    shoot(page, "flow-3-resumed")

    # Cancel the resumed run: stopped, and not resumable.
    stop_through_dialog(page, "Cancel run")
    second = server.json("GET", "/api/runs/2")
    assert second["status"] == "stopped" and not second["can_resume"], second
    assert second["resumed_from_run_id"] == 1
    assert min(loss_steps(second)) == first["final_step"] + 1

    # Both runs are in the history, linked to each other, with their sparklines.
    row2 = page.locator('#runs-list li[data-run-id="2"]')
    expect(row2).to_contain_text("resumed from #1")
    expect(row1).to_contain_text("resumed as #2")
    # The continuation was cancelled, keeping nothing: the first run can be resumed again.
    expect(row1.get_by_role("button", name="Resume first try")).to_have_count(1)
    for row in (row1, row2):
        expect(row.locator(".badge")).to_have_text("stopped")
        expect(row.locator("svg.sparkline")).to_have_count(1)
        expect(row.locator(".run-facts div", has_text="Modality").locator("dd")).to_have_text("text")

    # Compare them: one chart with every step either run has, one series per run.
    page.get_by_label("Select first try to compare").first.check()
    page.get_by_label("Select first try to compare").nth(1).check()
    page.get_by_role("button", name="Compare selected (2)").click()
    compare = page.locator("#compare")
    expect(compare).to_be_visible()
    union = set(loss_steps(first)) | set(loss_steps(second))
    expect(page.locator("#chart-compare")).to_have_attribute("data-points", str(len(union)))
    expect(compare.locator(".u-legend")).to_contain_text("(#1)")
    expect(compare.locator(".u-legend")).to_contain_text("(#2)")
    page.get_by_label("Smooth (moving average)").check()
    expect(page.locator("#chart-compare")).to_have_attribute("data-points", str(len(union)))
    shoot(page, "flow-4-history-compare")

    # Rename the first run.
    row1.get_by_role("button", name="Rename first try").click()
    rename = page.get_by_role("dialog", name="Rename run")
    rename.get_by_label("Name").fill("baseline")
    rename.get_by_role("button", name="Rename").click()
    expect(row1.locator(".run-name")).to_have_text("baseline")
    assert server.json("GET", "/api/runs/1")["display_name"] == "baseline"

    # Delete the resumed run but keep files, then the first run with its files.
    folder = Path(first["output_dir"])
    assert folder.is_dir()
    delete_run(page, row2, "Delete first try", with_files=False)
    expect(row2).to_have_count(0)
    assert folder.is_dir()
    delete_run(page, row1, "Delete baseline", with_files=True)
    expect(row1).to_have_count(0)
    expect(page.locator("#runs-empty")).to_be_visible()
    assert not folder.exists()
    assert server.json("GET", "/api/runs")["total"] == 0
    shoot(page, "flow-5-history-emptied")


def delete_run(page, row, button_name: str, *, with_files: bool) -> None:
    row.get_by_role("button", name=button_name).click()
    dialog = page.get_by_role("dialog", name="Delete run")
    expect(dialog).to_contain_text("will be removed from the history")
    files = dialog.get_by_label("Also delete its files")
    if with_files:
        files.check()
    else:
        expect(files).not_to_be_checked()
    dialog.get_by_role("button", name="Delete").click()


def test_a_failing_run_shows_its_error_and_can_be_cleared(server, open_page, fill_demo_config, demo_assets, shoot):
    page = open_page()
    # Plain-text rows read as alpaca: valid settings, but the worker finds no instruction column.
    fill_demo_config(page, data=demo_assets.text, max_steps=5)
    page.get_by_label("Format").select_option("alpaca")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#run-phase")).to_have_text("error", timeout=RUN_START_MS)
    expect(page.locator("#run-error")).to_contain_text("needs columns")
    expect(page.locator("#run-steps")).to_have_text("No steps ran")
    expect(page.get_by_role("button", name="Stop…")).to_be_disabled()
    row = page.locator('#runs-list li[data-run-id="1"]')
    expect(row.locator(".badge")).to_have_text("error")
    expect(row.locator(".run-error-line")).to_contain_text("needs columns")
    shoot(page, "flow-6-failed-run")

    page.get_by_role("button", name="Clear").click()
    expect(page.locator("#run-phase")).to_have_text("idle")
    expect(page.locator("#run-steps")).to_have_text("No run yet")
    expect(page.locator("#run-error")).to_be_hidden()


def test_the_stopping_notice_lasts_exactly_as_long_as_the_stop(server, open_page, fill_demo_config):
    page = open_page()
    # The page's clock is faked so the test can stop it: a notice that merely times out
    # would then stay for good, and only one that follows the run can go.
    page.clock.install()
    page.reload()
    fill_demo_config(page)
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#run-phase")).to_have_text("training", timeout=RUN_START_MS)
    wait_points(page, 3)
    # A stop of the tiny model can end within a poll of `expect`, so the page itself
    # records the notice's life: whether it came, and what the run's phase read when it
    # went (observers run once the page's own change is complete).
    page.evaluate("""() => {
        window.stopNotice = { came: false, wentAtPhase: null };
        const isIt = (node) => node.textContent.includes("Stopping at the next step");
        new MutationObserver((changes) => {
            for (const change of changes) {
                if ([...change.addedNodes].some(isIt)) window.stopNotice.came = true;
                if ([...change.removedNodes].some(isIt)) {
                    window.stopNotice.wentAtPhase = document.getElementById("run-phase").textContent;
                }
            }
        }).observe(document.getElementById("notices"), { childList: true });
    }""")

    page.get_by_role("button", name="Stop…").click()
    page.clock.pause_at(page.evaluate("Date.now()") / 1000 + 1)
    # The stream's `complete` event brings the end; no timer of the page runs from here on.
    page.get_by_role("dialog", name="Stop this run?").get_by_role("button", name="Stop and save").click()
    expect(page.locator("#run-phase")).to_have_text("stopped", timeout=RUN_START_MS)
    stopping = page.locator("#notices .notice", has_text="Stopping at the next step")
    expect(stopping).to_have_count(0)
    assert page.evaluate("window.stopNotice") == {"came": True, "wentAtPhase": "stopped"}
    page.clock.resume()
