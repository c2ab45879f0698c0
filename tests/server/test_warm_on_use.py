"""The warm children follow the server's use, on a real server started as `tunelab serve`
starts it (prewarm on): none at start, none for requests without a key or for a POST; the
warm training worker once a client with a key reads the lab; both it and the preview spare
ended after the idle time without requests (TUNELAB_WARM_IDLE_S, short here), and started
again by the next use. A bad idle setting falls back to the default with a warning."""

from __future__ import annotations

import logging
import time

import psutil
import pytest

from tunelab.server.warm_on_use import DEFAULT_IDLE_S, IDLE_ENV, idle_seconds

SPARE = ["-m", "tunelab.worker.preview.child", "--warm"]
IDLE_S = "3"


def children(server, kind: str) -> list[int]:
    """The server's live children of one kind: "worker" (a spawned training worker) or "spare"."""
    found = []
    for child in psutil.Process(server.pid).children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            line = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if (kind == "spare" and line[1:] == SPARE) or (kind == "worker" and any("spawn_main" in part for part in line)):
            found.append(child.pid)
    return found


def wait_for(what, description: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := what():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {description}")


@pytest.mark.slow
def test_warm_children_start_on_use_and_end_when_unused(start_server):
    server = start_server(prewarm=True, extra_env={IDLE_ENV: IDLE_S}, log_level="info")
    time.sleep(1.5)
    assert children(server, "worker") == []  # an unused server holds no warm worker
    with server.client(token=None) as anonymous:
        assert anonymous.get("/api/health").status_code == 200
        assert anonymous.get("/api/runs").status_code == 401
    with server.client() as client:
        assert client.post("/api/train/stop", json={}).status_code < 500  # a POST starts nothing
        time.sleep(1.0)
        assert children(server, "worker") == []

        assert client.get("/api/runs").status_code == 200  # the page (or the CLI) reads the lab
        first = wait_for(lambda: children(server, "worker"), "the warm worker to start")
        assert client.get("/api/datasets").status_code == 200  # the page lists the data files
        wait_for(lambda: children(server, "spare"), "the preview spare to start")

        # Requests within the idle time keep both.
        for _ in range(4):
            time.sleep(1.0)
            assert client.get("/api/train/status").status_code == 200
        assert children(server, "worker") == first and children(server, "spare")

        # Nobody asks for the idle time: both end.
        wait_for(lambda: not children(server, "worker") and not children(server, "spare"),
                 "the warm children to end", timeout=30)
        log = server.home / "logs" / "server.log"
        wait_for(lambda: "nobody has used the server" in log.read_text(), "the server to say why they ended")

        # The next read starts a new warm worker.
        assert client.get("/api/runs").status_code == 200
        again = wait_for(lambda: children(server, "worker"), "a new warm worker")
        assert again != first


def test_the_idle_setting(monkeypatch, caplog):
    monkeypatch.delenv(IDLE_ENV, raising=False)
    assert idle_seconds() == DEFAULT_IDLE_S
    monkeypatch.setenv(IDLE_ENV, "90")
    assert idle_seconds() == 90.0
    for bad in ("0", "-5", "ten minutes"):
        monkeypatch.setenv(IDLE_ENV, bad)
        with caplog.at_level(logging.WARNING, logger="tunelab.server"):
            assert idle_seconds() == DEFAULT_IDLE_S
        assert IDLE_ENV in caplog.text and repr(bad) in caplog.text
        caplog.clear()
