"""Bad input at the HTTP surface: schemathesis fuzzes every route with the token (no 5xx,
no response outside the documented schema), and every route but health refuses a
request without the right token — even a request that would otherwise succeed, which
then changes nothing. With API keys, a revoked key is refused everywhere, a viewer on
every route that changes anything, a member on every route acting on a run it does not
own; and no key's secret lies in the database files."""

from __future__ import annotations

import httpx

from fuzzing import run_schemathesis, sweep_auth, sweep_keys
from harness import start_run, wait_run_ended, worker_env

FUZZ_SEED = 1130
FUZZ_EXAMPLES = 40
# The coverage phase's ~1,350 boundary-value cases (70 s of them on the start route alone)
# run in `python bench/reliability.py --only fuzz`; the suite runs the random phases.
SUITE_PHASES = "examples,fuzzing,stateful"
KNOWN_RUNS = 3


def fuzz_server(start_server, demo_run):
    """A server whose runs finish at once, with a few finished runs to find by id."""
    server = start_server(extra_env=worker_env("fault_workers:completes_at_once", HF_HUB_OFFLINE="1"))
    with server.client() as client:
        for _ in range(KNOWN_RUNS):
            wait_run_ended(client, start_run(client, demo_run(max_steps=1)))
    return server


def test_fuzzing_every_route_finds_no_server_error_and_no_schema_violation(start_server, demo_run, demo_assets,
                                                                          tmp_path):
    server = fuzz_server(start_server, demo_run)
    result = run_schemathesis(server, demo_assets, KNOWN_RUNS, FUZZ_EXAMPLES, FUZZ_SEED, tmp_path / "st", SUITE_PHASES)
    # A 5xx's cause is in the server's log: show its end with schemathesis's report.
    assert result.returncode == 0, result.output[-6000:] + "\n--- server log ---\n" + (
        server.home / "server-stderr.log").read_text()[-6000:]
    assert result.cases > 400, result.output[-2000:]
    assert httpx.get(server.base_url + "/api/health").status_code == 200
    log = (server.home / "server-stderr.log").read_text()
    assert "Traceback" not in log  # nothing failed unseen behind a well-formed answer either


def test_every_route_but_health_refuses_wrong_tokens_revoked_keys_and_wrong_roles_and_does_nothing(start_server, demo_run):
    server = fuzz_server(start_server, demo_run)
    sweep = sweep_auth(server, demo_run)
    assert sweep.operations >= 12
    assert sweep.not_refused == []
    assert not sweep.history_changed
    keys = sweep_keys(server, demo_run)  # the same server: keys count from the next request on
    assert keys.operations == sweep.operations and keys.role_requests >= 10
    assert keys.not_refused == []
    assert not keys.history_changed
    assert keys.secrets_in_database == 0
