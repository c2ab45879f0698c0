"""A resumed run continues its own curve on the page: resumed from the history, its live
charts (the logged extra metrics' too) hold the first run's steps from step 1 (a series
of their own, with a marker at the resume point) and then its own; Compare draws its
whole curve the same way."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_START_MS = 120_000


def loss_steps(run: dict) -> list[int]:
    return [s for s, loss in zip(run["metrics"]["steps"], run["metrics"]["loss"]) if loss is not None]


def stop_and_save_at(server, run_id: int, step: int) -> dict:
    """Stop `run_id` with a save once it reached `step`; its history row after."""
    server.wait_for(lambda s: s.get("run_id") == run_id and (s.get("step") or 0) >= step, f"run {run_id} at step {step}")
    server.json("POST", f"/api/runs/{run_id}/stop", json={"save": True})
    server.wait_for(lambda s: s.get("run_id") == run_id and s.get("phase") == "stopped", f"run {run_id} stopped")
    return server.json("GET", f"/api/runs/{run_id}")


def test_a_resumed_runs_charts_and_compare_show_its_whole_curve(server, demo_assets, open_page, shoot):
    first_id = server.json("POST", "/api/train/start", json={
        "model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "display_name": "first try",
        "max_steps": 400, "max_seq_length": 128, "batch_size": 2, "gradient_accumulation_steps": 1})["job_id"]
    first = stop_and_save_at(server, first_id, 3)
    resumed_at = first["final_step"]
    before = loss_steps(first)
    assert before[0] == 1 and before[-1] == resumed_at

    page = open_page()
    page.locator(f'#runs-list li[data-run-id="{first_id}"]').get_by_role("button", name="Resume first try").click()
    expect(page.locator("#run-name")).to_contain_text(f"#{first_id + 1}", timeout=RUN_START_MS)
    second_id = first_id + 1
    label = f"resumed from Run #{first_id} at step {resumed_at}"
    # While it trains: the first run's steps lead, in their own series, up to a marker at the resume point.
    expect(page.locator("#run-phase")).to_have_text("training", timeout=RUN_START_MS)
    chart = page.locator("#chart-loss")
    expect(chart).to_have_attribute("data-markers", label)
    page.wait_for_function(
        f"Number(document.querySelector('#chart-loss').dataset.lastStep) >= {resumed_at + 2}", timeout=RUN_START_MS)
    own_live, _, earlier_live = chart.get_attribute("data-series-points").split(",")
    assert int(earlier_live) == len(before) and int(own_live) >= 2
    expect(page.locator("#run-lineage")).to_contain_text(label[0].upper() + label[1:])
    expect(page.locator("#chart-grad_norm")).to_have_attribute("data-markers", label)
    shoot(page, "resumed-1-live")

    second = stop_and_save_at(server, second_id, resumed_at + 3)
    after = loss_steps(second)
    assert after[0] == resumed_at + 1
    # Once stopped, every step of the whole curve is drawn, from step 1, each once.
    expect(chart).to_have_attribute("data-points", str(len(before) + len(after)))
    expect(chart).to_have_attribute("data-series-points", f"{len(after)},{len(before) + len(after)},{len(before)}")
    # So is the metric the method logs beyond the fixed ones (the first in the selector).
    extra = sorted(first["metrics"]["extra"])[0]
    expect(page.locator("#extra-series")).to_have_value(extra)
    extra_counts = [len(run["metrics"]["extra"][extra]["steps"]) for run in (second, first)]
    expect(page.locator("#chart-extra")).to_have_attribute("data-series-points", ",".join(map(str, extra_counts)))
    expect(page.locator("#chart-extra")).to_have_attribute("data-markers", label)

    # Compare: the resumed run's curve begins at step 1 too, marked where it took over.
    for run_id in (first_id, second_id):
        page.locator(f'#runs-list li[data-run-id="{run_id}"] .run-select').check()
    page.get_by_role("button", name="Compare selected (2)").click()
    compare = page.locator("#chart-compare")
    expect(compare).to_have_attribute("data-series-points", f"{len(before)},{len(before) + len(after)}")
    expect(compare).to_have_attribute("data-markers", f"#{second_id} {label}")
    page.get_by_label("Smooth (moving average)").check()
    expect(compare).to_have_attribute("data-series-points", f"{len(before)},{len(before) + len(after)}")
    shoot(page, "resumed-2-compare")
