"""One dataset-preview child started ahead of time, its imports done, waiting for a request.

A cold preview child spends nearly all of its time importing: `datasets`, then
transformers and what its first tokenizer load pulls in (torch, accelerate). On the demo
model and data that is about 99% of "Check dataset" (bench/dataset_check.py); the
reading and rendering take a few hundredths of a second. So, once someone lists the data
files (`GET /api/datasets`, which the page calls as it opens: a check is likely to follow
while the form is filled in), `tunelab serve` keeps one spare preview child
(`preview_child --warm`) that has done those imports and blocks reading its stdin; a
server nobody has opened holds none. A preview takes it if it is still alive
(else it starts a cold child, as before) and a new spare is started once that preview has
ended, not while it runs, so the two never compete for the CPU. Each child still serves
exactly one request and exits: a preview never sees another's state.

It follows TUNELAB_PREWARM like the warm worker (off in the tests, which start servers
that never preview). A spare costs an idle process of a few hundred MB; it exits when the
server shuts down (killed) or nobody has used the server for a while (warm_on_use.py), or when
the server dies (its stdin reads end-of-file and it returns). This module starts processes only: it imports nothing heavy.
"""

from __future__ import annotations

import asyncio
import sys

SPARE_ARGV = ("-m", "tunelab.worker.preview.child", "--warm")


class PreviewSpare:
    def __init__(self, enabled: bool, argv: tuple[str, ...] = SPARE_ARGV):
        self.enabled, self.argv = enabled, argv
        self._process: asyncio.subprocess.Process | None = None
        self._starting = asyncio.Lock()  # two previews ending together start one spare, not two

    @property
    def pid(self) -> int | None:
        """The waiting spare's process id (None: none waits)."""
        return self._process.pid if self._process is not None and self._process.returncode is None else None

    async def refill(self) -> None:
        """Start a spare unless one waits already (or spares are off)."""
        async with self._starting:
            if not self.enabled or self.pid is not None:
                return
            await self._reap()
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, *self.argv,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def take(self) -> asyncio.subprocess.Process | None:
        """The waiting spare, now the caller's to talk to and wait for; None when there is
        none alive (it was never started, failed, or was killed)."""
        if self.pid is None:
            await self._reap()
            return None
        process, self._process = self._process, None
        return process

    async def close(self) -> None:
        """End the waiting spare (the server shuts down, or nobody has used it for a while:
        warm_on_use.py); it holds nothing, so it is killed. A later `refill` starts another."""
        process, self._process = self._process, None
        if process is not None:
            if process.returncode is None:
                process.kill()
            await process.wait()

    async def _reap(self) -> None:
        """Collect a spare that exited on its own, so it leaves no zombie."""
        process, self._process = self._process, None
        if process is not None:
            await process.wait()
