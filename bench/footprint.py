"""Target 8 — server footprint: `tunelab serve` answers within 1.5 s of its launch, and
what an idle server holds in memory, everything it keeps alive counted.

The server is launched exactly as a user would (`tunelab serve --port N`, prewarming on
by default); the clock runs from the launch until `/api/health` first answers 200. The
memory is the total of the server and every process it keeps alive, as PSS summed (pages
shared between them counted once), against 150 MB. The warm children (the training
worker with torch & co imported for the next run, the dataset-preview spare) run while
someone uses the server and end after TUNELAB_WARM_IDLE_S without a request
(tunelab/server/warm_on_use.py): so the headline is the idle total after a page was open
and closed and the idle time went by; beside it, the total with nobody connected since
the launch, the total with the page open (what a user pays for while at work), and a
launch with `TUNELAB_PREWARM=0`. The server itself must have none of the training
libraries loaded (`/api/health?detail=1`).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import psutil

from results import Result, standalone
from server_proc import launch
from sidebyside import spread

ANSWER_TARGET_S = 1.5
RSS_TARGET_MB = 150.0

UNMET_NOTES = {
    "serve_answer": "Most of the start-up is importing FastAPI (its OpenAPI models, pydantic.v1 for its v1 check, opentelemetry), uvicorn, typer and pydantic, and building the routes; tunelab's own share is its config and API models. The CLI imports only what `serve` needs, the error responses build no validators, and the warm children start only once a client uses the server; on a loaded machine other processes still take the cores.",
}


# The spare preview child imports datasets and transformers after it starts: wait them out.
PREVIEW_WARM_S = 15.0
# The server's TUNELAB_WARM_IDLE_S here (600 s by default): the warm children end this long
# after the last request.
IDLE_S = 10.0
PAGE_POLL_S = 5.0  # the page's run panel polls the status this often between runs


def held(pid: int) -> dict[str, float]:
    """Memory in MB of the server process `pid` and every child it keeps, and which warm
    children (the training worker, the preview spare) are among them."""
    parent = psutil.Process(pid)
    own = parent.memory_full_info()
    children, theirs = [], []
    for child in parent.children(recursive=True):
        try:  # the warm children come and go (warm_on_use.py): one may end between the listing and the read
            theirs.append(child.memory_full_info())
            children.append(child)
        except psutil.NoSuchProcess:
            continue
    return {"server": own.rss / 2**20, "worker": sum(m.rss for m in theirs) / 2**20,
            "total_rss": (own.rss + sum(m.rss for m in theirs)) / 2**20,
            "total_pss": (own.pss + sum(m.pss for m in theirs)) / 2**20, "children": len(children),
            "warm": len(warm_children(children))}


def warm_children(children: list[psutil.Process]) -> list[psutil.Process]:
    """The warm training worker (a spawned multiprocessing child) and the preview spare."""
    found = []
    for child in children:
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "spawn_main" in line or "tunelab.worker.preview.child --warm" in line:
            found.append(child)
    return found


def wait_for_warm(pid: int, count: int, timeout: float) -> bool:
    """Until the server holds `count` warm children; whether it came to that in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if held(pid)["warm"] == count:
            return True
        time.sleep(0.5)
    return False


@contextmanager
def open_page(server) -> Iterator[None]:
    """What the open page asks of the server: it reads the runs (which starts the warm
    training worker), lists the data files (which starts the spare dataset-preview child)
    and then polls the run status every few seconds until it is closed."""
    closed = threading.Event()

    def poll() -> None:
        with server.client() as client:
            client.get("/api/runs").raise_for_status()
            client.get("/api/datasets").raise_for_status()
            while not closed.wait(PAGE_POLL_S):
                client.get("/api/train/status").raise_for_status()

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        yield
    finally:
        closed.set()
        poller.join()


def idle_memory(cli: str, prewarm: bool) -> tuple[float, dict[str, float], list[str]]:
    """Seconds to the first answer; memory in MB (server RSS, children RSS, total RSS and
    total PSS of the server and all its children) with nobody connected since the launch,
    with the page open, and after the page closed and the idle time went by; the heavy
    modules the server loaded."""
    server = launch(command=[cli, "serve", "--port", "{port}"],
                    extra_env={"TUNELAB_PREWARM": "1" if prewarm else "0", "TUNELAB_WARM_IDLE_S": str(IDLE_S)})
    try:
        answered = time.monotonic() - server.launched
        server.wait_until_warm()
        time.sleep(1.0)
        memory = held(server.process.pid)
        with server.client() as client:
            heavy = client.get("/api/health", params={"detail": 1}).json().get("heavy_modules") or []
        with open_page(server):
            memory["page_open_warm_seen"] = wait_for_warm(server.process.pid, 2, 120) if prewarm else True
            server.wait_until_warm()
            time.sleep(PREVIEW_WARM_S if prewarm else 0)
            page = held(server.process.pid)
        memory["page_open_total_pss"], memory["page_open_warm"] = page["total_pss"], page["warm"]
        # The page closed: no request comes; the warm children end after the idle time.
        closed = time.monotonic()
        memory["ended_after_idle"] = wait_for_warm(server.process.pid, 0, IDLE_S + 60)
        memory["ended_after_s"] = time.monotonic() - closed
        time.sleep(1.0)
        memory["after_idle_total_pss"] = held(server.process.pid)["total_pss"]
        return answered, memory, heavy
    finally:
        server.stop()


def measure(quick: bool) -> list[Result]:
    reps = 2 if quick else 4
    cli = shutil.which("tunelab", path=str(Path(sys.executable).parent)) or "tunelab"
    answers, memory, cold, heavy = [], [], [], []
    for _ in range(reps):
        answered, used, loaded = idle_memory(cli, prewarm=True)
        answers.append(answered)
        memory.append(used)
        heavy.extend(loaded)
        cold.append(idle_memory(cli, prewarm=False)[1])

    def figure(rows: list[dict], key: str) -> str:
        return spread([row[key] for row in rows]).text(0)

    command = f"python bench/footprint.py{' --quick' if quick else ''}"
    return [
        Result(key="serve_answer", title="8a. `tunelab serve` answers",
               measures="launch of `tunelab serve` → first 200 from /api/health ÷ 1.5 s",
               ratio=spread([a / ANSWER_TARGET_S for a in answers]), target=1.0, higher_is_better=False,
               command=command, details=[f"first answer after {spread(answers).text(2)} s"]),
        Result(key="idle_rss", title="8b. Idle server memory",
               measures="total PSS of the server and everything it keeps alive, idle: after the page was open (the "
                        "warm training worker and the preview spare running) and closed, and the idle time went by "
                        "÷ 150 MB",
               ratio=spread([m["after_idle_total_pss"] / RSS_TARGET_MB for m in memory]), target=1.0,
               higher_is_better=False, command=command,
               details=[f"`tunelab serve` as launched (prewarm on, the default), with TUNELAB_WARM_IDLE_S={IDLE_S:g} "
                        f"(600 by default): the warm children end that long after the last request",
                        f"after the page closed: the warm children ended {figure(memory, 'ended_after_s')} s after "
                        f"its last request; total {figure(memory, 'after_idle_total_pss')} MB PSS",
                        f"nobody connected since the launch: server {figure(memory, 'server')} MB RSS; total "
                        f"{figure(memory, 'total_rss')} MB RSS, {figure(memory, 'total_pss')} MB PSS (shared pages "
                        f"counted once)",
                        f"with the page open (it reads the runs, which starts the warm training worker, lists the data "
                        f"files, which starts the spare dataset-preview child, and polls every {PAGE_POLL_S:g} s): "
                        f"total {figure(memory, 'page_open_total_pss')} MB PSS — what the server holds while someone "
                        f"uses it, so that a run's first step and Check dataset do not wait for imports",
                        f"with `TUNELAB_PREWARM=0` (no warm children at all; each run pays its imports at start, see "
                        f"4.): server {figure(cold, 'server')} MB RSS, total {figure(cold, 'total_rss')} MB RSS with "
                        f"{max(row['children'] for row in cold)} child process(es)"],
               checks={"no training library loaded in the server": not heavy,
                       "with the page open, the warm training worker and the preview spare were running (and counted)":
                           all(m["page_open_warm_seen"] and m["page_open_warm"] == 2 for m in memory),
                       "after the page closed, both ended within the idle time": all(m["ended_after_idle"] for m in memory),
                       "nobody connected since the launch: no warm child": all(m["warm"] == 0 for m in memory)}),
    ]


if __name__ == "__main__":
    standalone("footprint", measure, UNMET_NOTES)
