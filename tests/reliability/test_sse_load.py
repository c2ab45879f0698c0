"""A crowd on the live stream during a run: every client receives every step, in order,
exactly once, then the run's end, while status pollers keep asking; the server's memory
stays bounded. (Timings are reported by bench/reliability.py, not asserted here.)"""

from __future__ import annotations

from harness import worker_env
from sse_load import run_sse_load

CLIENTS, POLLERS, STEPS = 20, 5, 60
# Generous: an idle server is ~100 MB; a leak per client or per step would pass this fast.
RSS_LIMIT_MB = 400


def test_a_crowd_of_stream_clients_each_gets_every_step_once_in_order(start_server, demo_run):
    server = start_server(extra_env=worker_env("scripted_workers:trainer", SCRIPTED_STEP_SECONDS="0.03"))
    result = run_sse_load(server, demo_run, CLIENTS, POLLERS, STEPS)
    assert result.problems() == []
    assert result.clients_with_every_step() == CLIENTS
    assert result.polls > 0 and result.poll_failures == 0
    assert max(result.rss_mb) < RSS_LIMIT_MB
