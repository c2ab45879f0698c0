"""The page's frame: asking for the API token, light and dark themes, a phone-width
screen without sideways scrolling, and controls that all carry a label."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

# Every visible control must have a name a screen reader can say.
UNLABELLED_CONTROLS_JS = """() => [...document.querySelectorAll('input, select, textarea, button')]
    .filter((el) => el.offsetParent !== null || el.closest('dialog[open]'))
    .filter((el) => el.type !== 'file')
    .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                    && !el.getAttribute('aria-labelledby') && !el.textContent.trim())
    .map((el) => el.outerHTML.slice(0, 120))"""


def test_token_is_asked_for_checked_and_remembered(server, open_page, shoot):
    page = open_page(with_token=False)
    dialog = page.get_by_role("dialog", name="API token")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("tunelab token")

    dialog.get_by_label("Token").fill("not-the-token")
    dialog.get_by_role("button", name="Use this token").click()
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("did not accept")
    shoot(page, "basics-1-token-refused")

    dialog.get_by_label("Token").fill(server.token)
    dialog.get_by_role("button", name="Use this token").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#runs-empty")).to_be_visible()

    # Remembered: a plain reload (no token in the URL) does not ask again.
    page.reload()
    expect(page.locator("#runs-empty")).to_be_visible()
    expect(dialog).to_be_hidden()


def test_token_from_the_url_leaves_the_address_bar(server, open_page):
    page = open_page()
    expect(page.locator("#runs-empty")).to_be_visible()
    assert "token" not in page.url


def test_phone_width_dark_theme_and_labels(server, open_page, shoot):
    page = open_page(width=390, height=844, color_scheme="dark")
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    expect(page.locator("#runs-empty")).to_be_visible()
    page.get_by_text("Advanced settings").click()
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at 390px wide"
    assert page.evaluate(UNLABELLED_CONTROLS_JS) == []
    shoot(page, "basics-2-phone-dark")

    # The toggle switches to light and the choice outlives a reload.
    toggle = page.locator("#theme-toggle")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    toggle.click()
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    shoot(page, "basics-3-phone-light")


def test_keyboard_alone_can_reach_and_submit_the_form(server, open_page):
    page = open_page()
    model = page.get_by_label("Model", exact=True)
    expect(model).to_be_visible()  # the form is drawn from the server's schema, one fetch after the page loads
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    # Tab from the main content reaches the form's first control...
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "f-model_name":
            break
    expect(model).to_be_focused()
    # ...and Enter submits it: the missing model is reported beside its field, focused.
    page.keyboard.press("Enter")
    expect(page.locator('[data-field="model_name"] .field-error')).to_contain_text("required")
    expect(model).to_be_focused()
