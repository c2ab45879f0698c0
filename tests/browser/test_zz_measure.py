import pytest
pytestmark = pytest.mark.browser

def test_measure(server, open_page):
    page = open_page(width=390, height=844)
    page.locator("#runs-empty").wait_for()
    h = lambda: page.evaluate("document.getElementById('configure').getBoundingClientRect().height")
    top = lambda: page.evaluate("document.getElementById('current-run').getBoundingClientRect().top + scrollY")
    print("closed", h(), "run panel top", top(), "doc", page.evaluate("document.documentElement.scrollHeight"))
    page.get_by_text("Advanced settings").click()
    print("open", h(), "run panel top", top())
