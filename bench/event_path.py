"""Target 5 — the event path: worker → pump → store → SSE client, through a real server.

A scripted worker (`event_workers.scripted`) sends real progress events without training.
The SSE client connects before each run starts, so every event travels the live path
(never the replay buffer). Throughput: the worker sends as fast as it can; the rate is
taken at the client from its first to its last `progress` event, and every step must
arrive once, in order, and be stored. Sustained: the worker paces 12,000 steps/s for
three seconds; everything must arrive (a client that falls a queue's length behind is
dropped by design) and the lag — arrival at the client minus the worker's timestamp —
must stay bounded (its 95th percentile and maximum within the stated bounds): a client
seconds behind is not keeping up, even if nothing is lost. Latency: 100 steps/s while
one torch process per core multiplies matrices (`cpu_load.training_load`: real training
load on every core, besides the scripted worker's own busy core); latency is the same
arrival-minus-timestamp.

Two figures show where the time goes, measured in the same run: the bare transport
(`event_transport.bare_rate`: the same worker's queue read by a loop that only unpickles,
the ceiling of the whole path on this machine) and the server's CPU seconds per 10,000
events (its user + system time over a burst, a figure other load moves less than a rate).
"""

from __future__ import annotations

import time

import psutil

from assets import demo_assets
from cpu_load import training_load
from event_transport import bare_rate
from results import Result, standalone
from server_proc import Server, launch, sse_events
from sidebyside import spread

THROUGHPUT_TARGET = 10_000
P99_TARGET_S = 0.050
SUSTAINED_PER_S, SUSTAINED_S = 12_000, 3
# Keeping up at the sustained rate: 95% of events within 100 ms, none later than 250 ms
# (3,000 events at 12,000 a second).
LAG_P95_BOUND_S, LAG_MAX_BOUND_S = 0.100, 0.250

UNMET_NOTES = {
    "event_throughput": "The figures above show where the time goes: the bare transport under the path (the same worker's queue read by a loop that only unpickles) carries several times what the whole path does, and the server spends a few hundred µs of CPU on each event: the pump unpickles, checks and applies it, the metric buffer writes it to SQLite, the event loop is handed it, and the stream encodes and writes it, all in one Python process whose interpreter lock the pump, the metric writer and uvicorn share. Tried: the stream's per-event `wait_for` went (2026-12-01); events that are ready now share one SSE write and one wake-up of the event loop (2026-12-02), which helps when the stream falls behind and changes nothing when it keeps up. The 2026-11-30 figure (13,205 events/s) came from a faster machine, not from older code: on 2026-12-02 the 2026-12-01 server (d606ff3) and the one this stop started from (a2adbdc), run side by side on this machine, carried the same rate (2,163-2,271 and 2,455-2,574 events/s), and the plain TRL arm of target 1, which tunelab does not touch, fell from 10,806 to 3,592 tokens/s between those full runs with identical settings. Where the sustained check's lag comes from (measured 2026-12-05, server and client CPU over one 36,000-step sustained run): the server spent 2.5-2.9 s of CPU (69-81 µs an event; py-spy: the event loop's socket writes, JSON encoding and wake-ups, the pump's poll, read and apply) and the SSE client 0.4 s, while the scripted worker keeps one of the two cores busy as a training step does: the machine's two cores are full, so the server keeps up only with its per-event time cut by about a third. What would reach 10,000 here: a worker that sends its steps in batches and a pump that applies a batch at once (a change to the worker protocol), so the per-event Python work runs once per batch.",
    "event_latency": "Latency is the pump's blocking read plus the event loop's turn; a run whose worker keeps both "
                     "cores busy delays both.",
}


def live_run(server: Server, body: dict) -> tuple[list[int], list[float], list[float], int]:
    """Steps, arrival times and worker timestamps of one run's live events, and its run id."""
    with server.client() as client:
        deadline = time.monotonic() + 30
        while client.get("/api/train/status").json()["phase"] != "idle":
            # Idle, so the stream below follows the next run; 409 while the last one exits.
            if client.post("/api/train/reset").status_code != 409 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        steps, arrived, stamped = [], [], []
        with client.stream("GET", "/api/train/progress") as stream:
            lines = stream.iter_lines()
            while not next(lines).startswith("retry:"):
                pass  # subscribed: from here on nothing is missed
            run_id = client.post("/api/train/start", json=body).raise_for_status().json()["job_id"]
            for name, data, at in sse_events(lines):
                if name == "progress":
                    steps.append(data["step"])
                    arrived.append(at)
                    stamped.append(data["ts"])
                elif name in ("complete", "error"):
                    if data.get("status") != "completed":
                        raise RuntimeError(f"scripted run ended {data.get('status')}: {data.get('error')}")
                    break
    return steps, arrived, stamped, run_id


def stored_steps(server: Server, run_id: int) -> int:
    with server.client() as client:
        return len(client.get(f"/api/runs/{run_id}").raise_for_status().json()["metrics"]["steps"])


def measure(quick: bool) -> list[Result]:
    demo = demo_assets()
    base = {"model_name": str(demo.model_dir), "local_datasets": [str(demo.chatml)]}
    reps = 2 if quick else 3
    flood_steps, paced_steps = 10_000, (300 if quick else 1000)
    sustained_steps = SUSTAINED_PER_S * SUSTAINED_S
    rates, bare, cpu, lags, lag95s, p99s, p50s = [], [], [], [], [], [], []
    complete = sustained_ok = True
    server = launch({"TUNELAB_WORKER_TARGET": "event_workers:scripted", "TUNELAB_PREWARM": "0"}, demo.root)
    try:
        server_process = psutil.Process(server.process.pid)
        for _ in range(reps):
            bare.append(bare_rate(flood_steps))
            before = server_process.cpu_times()
            steps, arrived, _, run_id = live_run(server, {**base, "max_steps": flood_steps})
            after = server_process.cpu_times()
            cpu.append((after.user + after.system - before.user - before.system) * 10_000 / flood_steps)
            rates.append((len(steps) - 1) / (arrived[-1] - arrived[0]))
            complete &= steps == list(range(1, flood_steps + 1)) and stored_steps(server, run_id) == flood_steps

            paced = {**base, "max_steps": sustained_steps, "display_name": f"{SUSTAINED_PER_S} steps/s"}
            steps, arrived, stamped, run_id = live_run(server, paced)
            sustained_ok &= steps == list(range(1, sustained_steps + 1)) and stored_steps(server, run_id) == sustained_steps
            lag = sorted(a - s for a, s in zip(arrived, stamped))
            lags.append(lag[-1])
            lag95s.append(lag[int(0.95 * (len(lag) - 1))])

            with training_load() as loaders:
                steps, arrived, stamped, _ = live_run(server, {**base, "max_steps": paced_steps,
                                                               "display_name": "100 steps/s"})
            latencies = sorted(a - s for a, s in zip(arrived, stamped))
            p99s.append(latencies[int(0.99 * (len(latencies) - 1))])
            p50s.append(latencies[len(latencies) // 2])
    finally:
        server.stop()
    command = f"python bench/event_path.py{' --quick' if quick else ''}"
    return [
        Result(key="event_throughput", title="5a. Event path throughput",
               measures="progress events per second, worker → pump → store → SSE client ÷ 10,000",
               ratio=spread([r / THROUGHPUT_TARGET for r in rates]), target=1.0, higher_is_better=True,
               command=command,
               details=[f"bursts of {flood_steps} events, live: {spread(rates).text(0)} events/s at the client",
                        f"the bare transport alone (the same worker's queue read by a loop that only unpickles, in "
                        f"turn with the bursts): {spread(bare).text(0)} events/s; the whole path carries "
                        f"{spread([r / b for r, b in zip(rates, bare)]).text(2)} of it",
                        f"server CPU (user + system) per 10,000 events of a burst: {spread(cpu).text(2)} s",
                        f"{SUSTAINED_PER_S} steps/s for {SUSTAINED_S} s: all delivered and stored: {sustained_ok}; "
                        f"lag 95th percentile {spread([x * 1000 for x in lag95s]).text(0)} ms, maximum "
                        f"{spread([x * 1000 for x in lags]).text(0)} ms (bounds {LAG_P95_BOUND_S * 1000:.0f} ms and "
                        f"{LAG_MAX_BOUND_S * 1000:.0f} ms)"],
               checks={"every step arrived once, in order, and was stored": complete,
                       f"{SUSTAINED_PER_S} steps/s sustained for {SUSTAINED_S} s without loss": sustained_ok,
                       f"{SUSTAINED_PER_S} steps/s kept up: lag p95 ≤ {LAG_P95_BOUND_S * 1000:.0f} ms and max ≤ "
                       f"{LAG_MAX_BOUND_S * 1000:.0f} ms in every run":
                           max(lag95s) <= LAG_P95_BOUND_S and max(lags) <= LAG_MAX_BOUND_S}),
        Result(key="event_latency", title="5b. Event latency at 100 steps/s",
               measures="p99 latency worker → SSE client at 100 steps/s ÷ 50 ms",
               ratio=spread([p / P99_TARGET_S for p in p99s]), target=1.0, higher_is_better=False,
               command=command,
               details=[f"{paced_steps} steps at 100 steps/s with the worker's core busy and {loaders} torch matmul "
                        "process(es) loading every core; "
                        f"p99 {spread([p * 1000 for p in p99s]).text(1)} ms, "
                        f"median {spread([p * 1000 for p in p50s]).text(1)} ms"]),
    ]


if __name__ == "__main__":
    standalone("event_path", measure, UNMET_NOTES)
