"""The configure form's memory estimate: it appears once a model is named, names each
term, and follows the form as it changes (debounced)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser


def test_the_estimate_follows_the_form(server, open_page, demo_assets, shoot):
    page = open_page()
    panel = page.locator("#memory-estimate")
    expect(panel).to_be_hidden()
    page.get_by_label("Model", exact=True).fill(str(demo_assets.model_dir))
    expect(page.locator("#memory-total")).to_contain_text("Memory estimate:", timeout=20_000)
    for term in ("weights", "adapter", "gradients", "optimizer", "activations", "logits"):
        expect(panel.locator(f'dt[data-term="{term}"]')).to_be_visible()
    expect(page.locator("#memory-verdict")).to_contain_text("Fits: this machine's RAM")
    activations = panel.locator('dt[data-term="activations"] + dd')
    before = activations.inner_text()
    page.get_by_label("Batch size").fill("64")
    expect(activations).not_to_have_text(before, timeout=20_000)
    shoot(page, "configure-memory-estimate")
