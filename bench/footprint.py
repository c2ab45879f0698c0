"""Target 8 — server footprint: `tunelab serve` answers within 1.5 s of its launch, and
what an idle server holds in memory, everything it keeps alive counted.

The server is launched exactly as a user would (`tunelab serve --port N`, prewarming on
by default); the clock runs from the launch until `/api/health` first answers 200. The
memory headline is the idle total of the server and every process it keeps alive — the
prewarmed worker, a separate process with torch & co imported waiting for the next run,
is on by default and the user pays for it — as PSS summed (pages the two share counted
once), against 150 MB, with nobody connected. Beside it: server alone, worker alone, RSS
summed; the total once the page is open (it lists the data files, which starts the spare
dataset-preview child); and a second launch with `TUNELAB_PREWARM=0`, which shows what
turning the prewarm off saves. The server
itself must have none of the training libraries loaded (`/api/health?detail=1`).
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import psutil

from results import Result, standalone
from server_proc import launch
from sidebyside import spread

ANSWER_TARGET_S = 1.5
RSS_TARGET_MB = 150.0

UNMET_NOTES = {
    "serve_answer": "Most of the start-up is importing FastAPI (its OpenAPI models, pydantic.v1 for its v1 check, opentelemetry), uvicorn, typer and pydantic, and building the routes; tunelab's own share is its config and API models. The CLI imports only what `serve` needs, the error responses build no validators, and the prewarmed worker starts once the server is ready; on a loaded machine other processes still take the cores.",
    "idle_rss": "The total is mostly the prewarmed worker: torch, transformers, peft, trl and datasets imported "
                "ahead so that a run's first step does not wait for them (target 4). The server process itself "
                "imports no training library (checked) and holds FastAPI, pydantic, uvicorn, SQLite and the plot "
                "code. TUNELAB_PREWARM=0 gives the worker's memory back, at the price of each run paying its "
                "imports at start (the figure is in the details). Not tried yet: starting the prewarmed worker "
                "only while a page or CLI client is connected.",
}


# The spare preview child imports datasets and transformers after it starts: wait them out.
PREVIEW_WARM_S = 15.0


def held(pid: int) -> dict[str, float]:
    """Memory in MB of the server process `pid` and every child it keeps."""
    parent = psutil.Process(pid)
    children = parent.children(recursive=True)
    own = parent.memory_full_info()
    theirs = [child.memory_full_info() for child in children]
    return {"server": own.rss / 2**20, "worker": sum(m.rss for m in theirs) / 2**20,
            "total_rss": (own.rss + sum(m.rss for m in theirs)) / 2**20,
            "total_pss": (own.pss + sum(m.pss for m in theirs)) / 2**20, "children": len(children)}


def idle_memory(cli: str, prewarm: bool) -> tuple[float, dict[str, float], list[str]]:
    """Seconds to the first answer, idle memory in MB (server RSS, worker RSS, total RSS and
    total PSS of the server and all its children) and the heavy modules the server loaded."""
    server = launch(command=[cli, "serve", "--port", "{port}"], extra_env={"TUNELAB_PREWARM": "1" if prewarm else "0"})
    try:
        answered = time.monotonic() - server.launched
        server.wait_until_warm()
        time.sleep(1.0)
        memory = held(server.process.pid)
        with server.client() as client:
            heavy = client.get("/api/health", params={"detail": 1}).json().get("heavy_modules") or []
            # Opening the page lists the data files, which starts the spare dataset-preview child.
            client.get("/api/datasets").raise_for_status()
        time.sleep(1.0)
        deadline = time.monotonic() + 120
        while prewarm and time.monotonic() < deadline and held(server.process.pid)["children"] < memory["children"] + 1:
            time.sleep(0.5)
        time.sleep(PREVIEW_WARM_S if prewarm else 0)
        memory["page_open_total_pss"] = held(server.process.pid)["total_pss"]
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
               measures="idle total PSS of the server and everything it keeps alive (the prewarmed worker, on by "
                        "default) ÷ 150 MB",
               ratio=spread([m["total_pss"] / RSS_TARGET_MB for m in memory]), target=1.0, higher_is_better=False,
               command=command,
               details=[f"default (prewarm on), nobody connected: server alone {figure(memory, 'server')} MB RSS; the "
                        f"prewarmed training worker "
                        f"{figure(memory, 'worker')} MB RSS; total {figure(memory, 'total_rss')} MB RSS, "
                        f"{figure(memory, 'total_pss')} MB PSS (shared pages counted once)",
                        f"with the page open (it lists the data files, which starts the spare dataset-preview child "
                        f"that makes Check dataset answer at once): total {figure(memory, 'page_open_total_pss')} MB PSS",
                        f"with `TUNELAB_PREWARM=0` (no worker waits; each run pays its imports at start, see 4.): "
                        f"server {figure(cold, 'server')} MB RSS, total {figure(cold, 'total_rss')} MB RSS with "
                        f"{max(row['children'] for row in cold)} child process(es)",
                        "the prewarm is a choice: set TUNELAB_PREWARM=0 in the server's environment to turn it off "
                        "and give back the worker's memory"],
               checks={"no training library loaded in the server": not heavy,
                       "a prewarmed worker was running (and counted) with prewarm on": all(m["children"] >= 1 for m in memory)}),
    ]


if __name__ == "__main__":
    standalone("footprint", measure, UNMET_NOTES)
