"""The eval-loss chart says why it is empty: a run with evaluation off names the form
fields that turn it on, and a run that evaluates says at which step its first eval comes."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_START_MS = 120_000
AFTER = "(id) => getComputedStyle(document.getElementById(id), '::after').content"


def _start(page, server) -> None:
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#run-phase")).to_have_text("training", timeout=RUN_START_MS)


def _stop(page, server) -> None:
    server.json("POST", "/api/train/stop", json={"save": False})
    expect(page.locator("#run-phase")).not_to_have_text("training", timeout=RUN_START_MS)


def test_the_eval_chart_says_how_to_turn_evaluation_on_and_when_it_comes(server, open_page, fill_demo_config, open_section,
                                                                         shoot):
    page = open_page()
    note = page.locator("#eval-note")
    expect(note).to_be_hidden()  # no run yet: nothing to say about one
    assert page.evaluate(AFTER, "chart-eval_loss") == '"No data yet"'

    fill_demo_config(page)
    _start(page, server)
    expect(note).to_be_visible()
    expect(note).to_contain_text("Evaluation is off for this run (Eval every is 0)")
    # The words are the form's own labels, so a person can find each field by them.
    for label in ("Eval every", "Eval files", "Eval split", "Eval holdout share"):
        expect(note).to_contain_text(label)
        assert page.get_by_label(label, exact=True).count() == 1, label
    # The note takes the place of the bare "No data yet".
    assert page.evaluate(AFTER, "chart-eval_loss") == "none"
    shoot(page, "eval-note-1-off")
    _stop(page, server)

    # A share of the run: a quarter of 2,000 steps evaluates first at step 500.
    open_section(page, "Evaluation")  # folded under "Advanced settings", as the note says
    page.get_by_label("Eval every", exact=True).fill("0.25")
    page.get_by_label("Eval holdout share", exact=True).fill("0.1")
    _start(page, server)
    expect(note).to_have_text("The first evaluation comes at step 500.")
    shoot(page, "eval-note-2-first-eval")
    _stop(page, server)
