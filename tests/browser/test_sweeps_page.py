"""The page's Sweeps section with a real server training the demo model: a small sweep
started over the API (eval on a held-out split, a median pruner) is listed with its trials,
their complete and pruned states, its objective and parameters, charts and the best run
marked; the best run opens in the history. A viewer sees it all and can start nothing; a
sweep started from the page with a bad space is refused there, naming the field."""

from __future__ import annotations

import time

import httpx
import pytest
from playwright.sync_api import expect

from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

pytestmark = [pytest.mark.browser]
WAIT_S = 400


def sweep_body(demo_assets) -> dict:
    """Three trials, the first (seeded random sampler: seed 6) at a learning rate that learns,
    the next two at one that barely moves: the median pruner stops those at their first eval."""
    base = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "max_steps": 6,
            "max_seq_length": 96, "batch_size": 2, "gradient_accumulation_steps": 1, "eval_steps": 2,
            "eval_holdout": 0.2}
    return {"name": "page-sweep", "base": base, "trials": 3, "sampler": "random", "seed": 6, "pruner": "median",
            "pruner_startup_trials": 1,
            "space": {"learning_rate": {"choice": [5e-3, 1e-6]}, "lora_r": {"choice": [4, 16]}}}


def finished_sweep(server) -> dict:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        (sweep,) = server.json("GET", "/api/sweeps")
        if not sweep["running"]:
            return sweep
        time.sleep(0.5)
    raise AssertionError(f"the sweep did not finish: {sweep}")


def test_the_sweeps_view_shows_trials_states_and_the_best_run_and_opens_it(server, open_page, demo_assets, shoot):
    started = server.json("POST", "/api/sweeps", json=sweep_body(demo_assets))
    page = open_page()
    sweep = finished_sweep(server)
    trials = {t["trial"]: t for t in sweep["trials"]}
    assert [t["state"] for t in sweep["trials"]] == ["complete", "pruned", "pruned"], sweep
    assert sweep["best_run_id"] == trials[0]["run_id"]

    page.locator("#refresh-sweeps").click()
    expect(page.locator("#sweep-pick")).to_have_value(str(started["id"]))
    rows = page.locator("#sweep-trials tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#sweep-summary")).to_contain_text(f"best: run #{sweep['best_run_id']}")
    expect(page.locator("#sweep-summary")).to_contain_text("3 of 3 trials")
    expect(page.locator("#sweep-stop")).to_be_hidden()
    for number, trial in trials.items():
        row = page.locator(f"#sweep-trials tbody tr[data-trial='{number}']")
        expect(row.locator(".badge")).to_have_text(trial["state"])
        expect(row).to_contain_text(f"Run #{trial['run_id']}")
        expect(row).to_contain_text(str(trial["params"]["lora_r"]))
    best = page.locator("#sweep-trials tbody tr.is-best")
    expect(best).to_have_count(1)
    expect(best).to_have_attribute("data-trial", "0")
    expect(best.locator(".best-tag")).to_have_text("best")
    # Every trial reported the objective (the pruned ones until they were stopped): a point each.
    expect(page.locator("#sweep-chart-objective")).to_have_attribute("data-points", "3")
    expect(page.locator("#sweep-chart-learning_rate")).to_have_attribute("data-points", "3")
    expect(page.locator("#sweep-importances-empty")).to_be_visible()  # one complete trial says nothing yet
    expect(page.locator("#sweep-start")).to_be_enabled()  # inside the folded "Start a sweep"
    shoot(page, "sweeps-1-trials")

    page.get_by_role("button", name=f"Open run #{sweep['best_run_id']} of trial 0 in the history").click()
    opened = page.locator(f"#runs-list li[data-run-id='{sweep['best_run_id']}']")
    expect(opened).to_have_class("run is-revealed")
    expect(opened).to_be_in_viewport()
    expect(opened).to_contain_text("page-sweep #0")
    expect(opened.locator(".badge")).to_have_text("completed")
    shoot(page, "sweeps-2-best-run-opened")

    secret = new_secret()
    with Store(server.home / "tunelab.db") as store:
        store.add_api_key("watcher", "viewer", secret_hash(secret))
    viewer = open_page(token=secret)
    expect(viewer.locator("#sweep-trials tbody tr")).to_have_count(3)
    expect(viewer.locator("#sweep-trials tbody tr.is-best")).to_have_attribute("data-trial", "0")
    expect(viewer.locator("#sweep-start")).to_be_disabled()
    refused = httpx.post(server.url + "api/sweeps", json=sweep_body(demo_assets),
                         headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    assert refused.status_code == 403  # the server refuses what the page disables


def test_a_sweep_started_from_the_page_with_a_bad_space_is_refused_naming_the_field(server, open_page,
                                                                                   fill_demo_config):
    page = open_page()
    fill_demo_config(page, max_steps=6)
    page.locator("#sweeps summary").click()
    page.get_by_label("Search (YAML)").fill("name: bad\nspace:\n  lora_rank: {choice: [8, 16]}\ntrials: 2\n")
    page.get_by_role("button", name="Start sweep").click()
    expect(page.locator("#sweep-error")).to_contain_text("space.lora_rank")
    assert server.json("GET", "/api/sweeps") == [] and server.json("GET", "/api/runs")["runs"] == []
