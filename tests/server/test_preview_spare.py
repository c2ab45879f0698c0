"""The spare dataset-preview child on a real server started as `tunelab serve` starts it
(prewarm on): once the data files are listed (the page opening), a child with its imports
done waits; "Check dataset" is answered by it
(it is gone afterwards, its one request served) with the same preview a cold child
gives, and a new spare takes its place; a spare killed while it waits is replaced by a
cold child for that request, as if there were none. Without prewarm, no spare waits."""

from __future__ import annotations

import os
import signal
import time

import psutil

from test_datasets import count_rows

SPARE = ["-m", "tunelab.worker.preview.child", "--warm"]


def spares(server) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(server.pid).children():
        try:
            if child.cmdline()[1:] == SPARE and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def wait_for_spare(server, other_than: int | None = None, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [p.pid for p in spares(server)]
        if len(pids) == 1 and pids[0] != other_than:
            return pids[0]
        assert len(pids) <= 1, pids
        time.sleep(0.1)
    raise AssertionError(f"no new spare preview child (other than {other_than}) appeared")


def check(server, demo_assets) -> dict:
    body = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "rows": 2}
    with server.client() as client:
        answer = client.post("/api/datasets/preview", json=body)
    assert answer.status_code == 200, answer.text
    preview = answer.json()
    assert preview["format"] == "alpaca" and preview["rendered_with"] == "chat_template"
    assert preview["row_count"] == count_rows(demo_assets.alpaca) and len(preview["rows"]) == 2
    return preview


def test_a_spare_answers_the_check_and_is_replaced(start_server, demo_assets):
    server = start_server(prewarm=True)
    # None waits until someone opens the page (lists the data files): an unused server holds none.
    time.sleep(1)
    assert spares(server) == []
    with server.client() as client:
        assert client.get("/api/datasets").status_code == 200
    first = wait_for_spare(server)
    warm = check(server, demo_assets)
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
    second = wait_for_spare(server, other_than=first)
    # Killed while it waits: the next check starts a cold child, and gives the same preview.
    os.kill(second, signal.SIGKILL)
    cold = check(server, demo_assets)
    assert cold == warm
    wait_for_spare(server, other_than=second)
    with server.client() as client:
        assert client.get("/api/health", params={"detail": 1}).json()["heavy_modules"] == []


def test_without_prewarm_no_spare_waits(start_server, demo_assets):
    server = start_server()
    with server.client() as client:
        assert client.get("/api/datasets").status_code == 200
    check(server, demo_assets)
    time.sleep(1)
    assert spares(server) == []
