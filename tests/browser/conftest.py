"""Fixtures for the browser tests: a live `python -m tunelab.server` on a free loopback
port (temporary home, random token, the demo data readable), Debian's Chromium driven
headless by Playwright, a TCP proxy that can cut the page's connections the way a flaky
network does, and a screenshot helper writing under artifacts/screenshots/.

The tests skip, saying why, only when /usr/bin/chromium is absent; CI installs it from
Debian packages. Playwright never downloads a browser here.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
SERVER_START_S = 60


@dataclass
class LiveServer:
    url: str
    token: str
    home: Path

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.request(method, self.url.rstrip("/") + path, headers=headers, timeout=30, **kwargs)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.api(method, path, **kwargs)
        assert response.status_code < 400, f"{method} {path} -> {response.status_code} {response.text}"
        return response.json()

    def wait_for(self, predicate, what: str, timeout: float = 120) -> Any:
        """Poll the status until `predicate(status)` holds; fail naming `what` otherwise."""
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            status = self.json("GET", "/api/train/status")
            if predicate(status):
                return status
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; last status: {status}")


@pytest.fixture
def server_env() -> dict[str, str]:
    """More environment for the server; a test module overrides this fixture to set some."""
    return {}


@pytest.fixture
def server(home: Path, demo_assets, tmp_path: Path, server_env: dict[str, str]) -> Iterator[LiveServer]:
    """A real server process with its own home; stopped (and its worker with it) afterwards."""
    token = secrets.token_urlsafe(24)
    # No prewarmed worker (TUNELAB_PREWARM=0): its torch import, seconds of CPU per test,
    # would be thrown away by every page test that never trains.
    env = {**os.environ, "TUNELAB_HOME": str(home), "TUNELAB_TOKEN": token,
           "TUNELAB_DATA_ROOTS": str(demo_assets.root), "TUNELAB_PREWARM": "0", **server_env}
    log = open(tmp_path / "server.log", "w")
    command = [sys.executable, "-m", "tunelab.server", "--port", "0", "--log-level", "warning"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        url = _read_url(process, tmp_path / "server.log")
        _wait_healthy(url)
        yield LiveServer(url=url, token=token, home=home)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _read_url(process: subprocess.Popen, log_path: Path) -> str:
    """The URL the server prints once it listens; the rest of its stdout is drained."""
    found: list[str] = []
    ready = threading.Event()

    def reader() -> None:
        for line in process.stdout:
            if not found and line.startswith("tunelab serving on "):
                found.append(line.split(" on ", 1)[1].strip())
                ready.set()

    threading.Thread(target=reader, daemon=True).start()
    if not ready.wait(SERVER_START_S):
        raise AssertionError(f"server printed no URL; its log:\n{log_path.read_text()}")
    return found[0]


def _wait_healthy(url: str) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "api/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"server at {url} never answered /api/health")


class CuttableProxy:
    """A loopback TCP proxy in front of the server. `cut()` closes every connection open
    through it (as a dropped network would); new connections go through as before."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: set[socket.socket] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # listener closed
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self.lock:
                self.sockets |= {client, upstream}
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.discard(sock)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def cut(self) -> None:
        with self.lock:
            open_now = list(self.sockets)
        for sock in open_now:
            self._drop(sock)

    def close(self) -> None:
        self.listener.close()
        self.cut()


@pytest.fixture
def proxy(server: LiveServer) -> Iterator[CuttableProxy]:
    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    cuttable = CuttableProxy(port)
    yield cuttable
    cuttable.close()


# Module scope, not session: Playwright's sync API keeps an asyncio loop running on the
# main thread while it is open, which would break later tests that call asyncio.run().
@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser, server: LiveServer):
    """Open the page as `tunelab serve`'s link does (with the server's token, or `token`:
    an API key's secret); JavaScript errors fail the test."""
    contexts = []
    errors: list[str] = []

    def opener(width: int = 1280, height: int = 900, color_scheme: str = "light", with_token: bool = True,
               base_url: str | None = None, token: str | None = None):
        context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=color_scheme,
                                      accept_downloads=True)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto((base_url or server.url) + (f"#token={token or server.token}" if with_token else ""))
        return page

    yield opener
    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


@pytest.fixture
def shoot():
    """Save the whole page for a person to look at (artifacts/ is git-ignored)."""

    def save(page, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return save


def open_form_section(page, title: str) -> None:
    """Open the folded form section whose summary starts with `title` as a person does:
    by clicking its summary, and first those of the sections around it ("Advanced
    settings"); an open one is left open."""
    summary = page.locator("summary").filter(has_text=re.compile(rf"^\s*{re.escape(title)}"))
    folds = summary.locator("xpath=ancestor::details")  # outermost first
    for i in range(folds.count()):
        fold = folds.nth(i)
        if fold.get_attribute("open") is None:
            fold.locator(":scope > summary").click()


@pytest.fixture
def open_section():
    """`open_section(page, "Optimiser")`: see open_form_section."""
    return open_form_section


@pytest.fixture
def fill_demo_config(demo_assets):
    """Fill the form with a short demo run: the tiny model and the alpaca sample data.
    `max_steps` is generous so a run is still going when a test wants to stop it. The
    settings folded under "More training settings" are filled after opening it."""

    def fill(page, *, max_steps: int = 2000, name: str | None = None, data=None) -> None:
        page.get_by_label("Model", exact=True).fill(str(demo_assets.model_dir))
        page.get_by_label("Data files").fill(str(data or demo_assets.alpaca))
        open_form_section(page, "More training settings")
        page.get_by_label("Max sequence length").fill("128")
        page.get_by_label("Max steps").fill(str(max_steps))
        page.get_by_label("Batch size").fill("2")
        page.get_by_label("Gradient accumulation").fill("1")
        if name:
            page.get_by_label("Run name").fill(name)

    return fill
