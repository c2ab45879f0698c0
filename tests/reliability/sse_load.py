"""Many progress-stream clients and status pollers on one live server during a run:
shared by the suite (a small crowd) and bench/reliability.py (100 + 20).

Every client subscribes before the run starts, then must receive every step, in order,
exactly once, and the run's end. Latency is the time from a step's event in the worker
(its `ts`, same machine, same clock) to its arrival at a client. The server's resident
memory is sampled throughout.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import httpx
import psutil

SAMPLE_S = 0.2
POLL_S = 0.2


@dataclass
class ClientLog:
    steps: list[int] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    final: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class LoadResult:
    clients: list[ClientLog]
    expected_steps: list[int]
    polls: int
    poll_failures: int
    rss_mb: list[float]
    rss_before_mb: float

    def clients_with_every_step(self) -> int:
        return sum(1 for c in self.clients if c.steps == self.expected_steps and c.final is not None)

    def problems(self) -> list[str]:
        found = []
        for i, client in enumerate(self.clients):
            if client.error:
                found.append(f"client {i}: {client.error}")
            elif client.steps != self.expected_steps:
                missing = sorted(set(self.expected_steps) - set(client.steps))
                repeats = len(client.steps) != len(set(client.steps))
                found.append(f"client {i}: {len(client.steps)} steps, missing {missing[:5]}, "
                             f"in order: {client.steps == sorted(client.steps)}, repeats: {repeats}")
            elif client.final is None or client.final.get("status") != "completed":
                found.append(f"client {i}: ended with {client.final}")
        return found

    def latency_ms(self, quantile: float) -> float:
        values = sorted(v for c in self.clients for v in c.latencies_s)
        return 1000 * values[min(len(values) - 1, int(quantile * len(values)))]

    def median_latency_ms(self) -> float:
        return 1000 * statistics.median(v for c in self.clients for v in c.latencies_s)


async def _sse_blocks(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event name, data) for each complete event block, as it arrives."""
    name, data = "message", []
    async for line in response.aiter_lines():
        if line == "":
            if data or name != "message":
                yield name, "\n".join(data)
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line.startswith("retry:"):
            yield "retry", ""


async def _follow(client: httpx.AsyncClient, log: ClientLog, ready: Callable[[], None]) -> None:
    try:
        async with client.stream("GET", "/api/train/progress") as response:
            async for name, data in _sse_blocks(response):
                if name == "retry":  # sent once the stream has subscribed
                    ready()
                elif name == "progress":
                    event = json.loads(data)
                    log.latencies_s.append(time.time() - event["ts"])
                    log.steps.append(event["step"])
                elif name in ("complete", "error"):
                    log.final = json.loads(data)
                    return
    except Exception as exc:  # noqa: BLE001 - reported per client
        log.error = f"{type(exc).__name__}: {exc}"


async def _poll(client: httpx.AsyncClient, done: asyncio.Event, counts: dict[str, int]) -> None:
    while not done.is_set():
        response = await client.get("/api/train/status")
        counts["polls"] += 1
        counts["failures"] += response.status_code != 200
        await asyncio.sleep(POLL_S)


def _sample_rss(pid: int, done: threading.Event, samples: list[float]) -> None:
    process = psutil.Process(pid)
    while not done.is_set():
        samples.append(process.memory_info().rss / 2**20)
        done.wait(SAMPLE_S)


async def _crowd(server: Any, body: dict[str, Any], clients: int,
                 pollers: int) -> tuple[list[ClientLog], dict[str, int]]:
    limits = httpx.Limits(max_connections=clients + pollers + 8, max_keepalive_connections=clients + pollers + 8)
    headers = {"Authorization": f"Bearer {server.token}"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(30, read=120)) as client:
        logs = [ClientLog() for _ in range(clients)]
        all_subscribed = asyncio.Event()
        waiting = [clients]

        def one_ready() -> None:
            waiting[0] -= 1
            if waiting[0] == 0:
                all_subscribed.set()

        followers = [asyncio.create_task(_follow(client, log, one_ready)) for log in logs]
        await asyncio.wait_for(all_subscribed.wait(), 120)
        answer = await client.post("/api/train/start", json=body)
        assert answer.status_code == 200, answer.text
        done = asyncio.Event()
        counts = {"polls": 0, "failures": 0}
        polling = [asyncio.create_task(_poll(client, done, counts)) for _ in range(pollers)]
        await asyncio.gather(*followers)
        done.set()
        await asyncio.gather(*polling)
        return logs, counts


def run_sse_load(server: Any, make_body: Callable[..., dict[str, Any]], clients: int, pollers: int,
                 steps: int) -> LoadResult:
    """`clients` streams and `pollers` status pollers through one run of `steps` steps on
    `server` (whose worker paces its steps, e.g. scripted_workers:trainer)."""
    with server.client() as client:
        if client.get("/api/train/status").json()["phase"] in ("completed", "stopped", "error"):
            client.post("/api/train/reset")
    rss_before = psutil.Process(server.pid).memory_info().rss / 2**20
    samples: list[float] = []
    done = threading.Event()
    sampler = threading.Thread(target=_sample_rss, args=(server.pid, done, samples), daemon=True)
    sampler.start()
    try:
        logs, counts = asyncio.run(_crowd(server, make_body(max_steps=steps), clients, pollers))
    finally:
        done.set()
        sampler.join()
    return LoadResult(logs, list(range(1, steps + 1)), counts["polls"], counts["failures"], samples, rss_before)
