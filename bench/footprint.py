"""Target 8 — server footprint: `tunelab serve` answers within 1.5 s of its launch, and
an idle server's resident memory stays under 150 MB.

The server is launched exactly as a user would (`tunelab serve --port N`, prewarming on
by default); the clock runs from the launch until `/api/health` first answers 200. The
memory is the server process's own RSS once it is idle — the prewarmed worker is a
separate process (that is what keeps torch & co out of the server), and the server must
have none of the training libraries loaded (`/api/health?detail=1`).
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
    "serve_answer": "Start-up imports FastAPI, pydantic, uvicorn and the routes; the prewarmed worker starts after the "
                    "socket is bound but competes for the CPU while it imports.",
    "idle_rss": "The server imports no training library (checked); its memory is FastAPI, pydantic, uvicorn, SQLite "
                "and the plot code.",
}


def measure(quick: bool) -> list[Result]:
    reps = 2 if quick else 4
    cli = shutil.which("tunelab", path=str(Path(sys.executable).parent)) or "tunelab"
    answers, rss, heavy = [], [], []
    for _ in range(reps):
        server = launch(command=[cli, "serve", "--port", "{port}"])
        try:
            answers.append(time.monotonic() - server.launched)
            server.wait_until_warm()
            time.sleep(1.0)
            rss.append(psutil.Process(server.process.pid).memory_info().rss / 2**20)
            with server.client() as client:
                heavy.extend(client.get("/api/health", params={"detail": 1}).json().get("heavy_modules") or [])
        finally:
            server.stop()
    command = f"python bench/footprint.py{' --quick' if quick else ''}"
    return [
        Result(key="serve_answer", title="8a. `tunelab serve` answers",
               measures="launch of `tunelab serve` → first 200 from /api/health ÷ 1.5 s",
               ratio=spread([a / ANSWER_TARGET_S for a in answers]), target=1.0, higher_is_better=False,
               command=command, details=[f"first answer after {spread(answers).text(2)} s"]),
        Result(key="idle_rss", title="8b. Idle server memory",
               measures="idle server process RSS ÷ 150 MB",
               ratio=spread([r / RSS_TARGET_MB for r in rss]), target=1.0, higher_is_better=False,
               command=command, details=[f"server RSS {spread(rss).text(1)} MB (its prewarmed worker is a process of its own)"],
               checks={"no training library loaded in the server": not heavy}),
    ]


if __name__ == "__main__":
    standalone("footprint", measure, UNMET_NOTES)
