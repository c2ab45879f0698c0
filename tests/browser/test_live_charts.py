"""Live charts survive a reload and a dropped connection: rebuilt from the status
histories, then continued from the stream with no step missing and none doubled."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_START_MS = 120_000
CHARTS = ("loss", "learning_rate", "grad_norm")


def wait_points(page, at_least: int) -> None:
    page.wait_for_function(
        f"Number(document.querySelector('#chart-loss').dataset.points) >= {at_least}", timeout=RUN_START_MS)


def chart_state(page) -> dict[str, tuple[int, int]]:
    """(points, last step) of each chart, read in one go so they belong together."""
    return page.evaluate(
        """(names) => Object.fromEntries(names.map((n) => {
               const el = document.querySelector(`#chart-${n}`);
               return [n, [Number(el.dataset.points), Number(el.dataset.lastStep)]];
           }))""",
        list(CHARTS),
    )


def assert_no_gaps(page) -> None:
    # The demo logs every step from step 1, so a chart without gaps or doubles holds
    # exactly as many points as its last step.
    for name, (points, last_step) in chart_state(page).items():
        assert points == last_step, f"{name} chart has {points} points up to step {last_step}"


def test_reload_and_reconnect_mid_run_keep_every_step(server, proxy, open_page, fill_demo_config, shoot):
    page = open_page(base_url=f"http://127.0.0.1:{proxy.port}/")
    fill_demo_config(page)
    page.get_by_role("button", name="Start training").click()
    wait_points(page, 20)

    recorded = len(server.json("GET", "/api/train/metrics")["histories"]["steps"])
    page.reload()
    # Straight from the status histories: at least everything recorded before the reload...
    wait_points(page, recorded)
    # ...and then the stream carries on from there.
    wait_points(page, recorded + 15)
    assert_no_gaps(page)
    shoot(page, "charts-1-after-reload")

    # Drop the connection for a moment: EventSource reconnects with Last-Event-ID and
    # the server replays what was missed meanwhile.
    proxy.cut()
    expect(page.locator("#stream-state")).to_contain_text("reconnecting")
    expect(page.locator("#stream-state")).to_be_empty(timeout=RUN_START_MS)
    before = int(page.get_attribute("#chart-loss", "data-points"))
    wait_points(page, before + 15)
    assert_no_gaps(page)

    server.json("POST", "/api/train/stop", json={"save": True})
    expect(page.locator("#run-phase")).to_have_text("stopped", timeout=RUN_START_MS)
    histories = server.json("GET", "/api/train/metrics")["histories"]
    expected = {
        "loss": histories["steps"],
        "learning_rate": [s for s, lr in zip(histories["steps"], histories["learning_rate"]) if lr is not None],
        "grad_norm": histories["grad_norm_steps"],
    }
    for name, steps in expected.items():
        chart = page.locator(f"#chart-{name}")
        expect(chart).to_have_attribute("data-points", str(len(steps)))
        expect(chart).to_have_attribute("data-last-step", str(steps[-1]))
    shoot(page, "charts-2-stopped")
