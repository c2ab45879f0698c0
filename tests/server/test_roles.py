"""Keys, roles and ownership on every route: a table of caller × route × expected status,
whose rows must be exactly the app's API routes (a new route without a row fails here,
and one without a role rule fails at start-up), checked against a real server.

Callers: the home's token, an admin key, the member `alice` who owns the run in the
paths, the member `bob` who does not, a viewer, and a revoked key. Each request is one
that gets past the rule when allowed and changes nothing lasting (a rename aside): the
run row is `running` (inserted through the real store after the server started, so no
worker backs it), which the routes refuse to delete, resume or export with a 409.
"""

from __future__ import annotations

import time

import httpx
import pytest
from fastapi import FastAPI

from sse_helpers import scripted_worker_env, start_run
from tunelab.keys import new_secret, secret_hash
from tunelab.orchestrator.state import FINAL_PHASES
from tunelab.server.app import create_app
from tunelab.server.roles import api_routes, apply_rules
from tunelab.store import Store

CALLERS = ("token", "admin", "alice", "bob", "viewer", "revoked")
KEY_ROLES = {"admin": "admin", "alice": "member", "bob": "member", "viewer": "viewer", "revoked": "member"}
RUN = "{run_id}"
# (method, path): (status for token, admin, alice (owner), bob (other member), viewer, revoked key)
TABLE: dict[tuple[str, str], tuple[int, ...]] = {
    ("GET", "/api/health"): (200, 200, 200, 200, 200, 200),
    ("GET", "/api/me"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/inference"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/runs"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/runs/{run_id}"): (200, 200, 200, 200, 200, 401),
    ("PATCH", "/api/runs/{run_id}"): (200, 200, 200, 403, 403, 401),
    ("DELETE", "/api/runs/{run_id}"): (409, 409, 409, 403, 403, 401),
    ("POST", "/api/runs/{run_id}/resume"): (409, 409, 409, 403, 403, 401),
    ("POST", "/api/runs/{run_id}/export"): (409, 409, 409, 403, 403, 401),
    ("POST", "/api/runs/{run_id}/push"): (422, 422, 422, 403, 403, 401),  # a repo id without owner: refused before the Hub
    ("GET", "/api/runs/{run_id}/status"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/runs/{run_id}/progress"): (200, 200, 200, 200, 200, 401),
    ("POST", "/api/stream-tickets"): (200, 200, 200, 200, 200, 401),
    ("POST", "/api/runs/{run_id}/stop"): (409, 409, 409, 403, 403, 401),  # running, but not on this server
    ("GET", "/api/queue"): (200, 200, 200, 200, 200, 401),
    ("POST", "/api/runs/{run_id}/queue"): (409, 409, 409, 403, 403, 401),
    ("GET", "/api/sweeps"): (200, 200, 200, 200, 200, 401),
    ("POST", "/api/sweeps"): (422, 422, 422, 422, 403, 401),
    ("POST", "/api/sweeps/{sweep_id}/stop"): (404, 404, 404, 404, 403, 401),  # there is no sweep 1
    ("GET", "/api/runs/{run_id}/chat"): (409, 409, 409, 409, 409, 401),
    ("POST", "/api/runs/{run_id}/eval"): (409, 409, 409, 409, 403, 401),
    ("GET", "/api/runs/{run_id}/evals"): (200, 200, 200, 200, 200, 401),
    ("POST", "/api/runs/{run_id}/speak"): (409, 409, 409, 409, 403, 401),
    ("GET", "/api/runs/{run_id}/samples"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/runs/{run_id}/samples/{name}"): (404, 404, 404, 404, 404, 401),
    ("GET", "/api/runs/{run_id}/samples.zip"): (404, 404, 404, 404, 404, 401),  # the run speaks none
    ("GET", "/api/runs/{run_id}/exports"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/runs/{run_id}/exports/download"): (422, 422, 422, 403, 403, 401),  # no folder named
    ("GET", "/api/models/local"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/models/families"): (200, 200, 200, 200, 200, 401),
    ("POST", "/api/memory/estimate"): (422, 422, 422, 422, 422, 401),
    ("GET", "/api/train/status"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/train/metrics"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/train/progress"): (200, 200, 200, 200, 200, 401),
    ("GET", "/api/train/plot.png"): (200, 200, 200, 200, 200, 401),
    ("POST", "/api/train/start"): (422, 422, 422, 422, 403, 401),
    ("POST", "/api/train/check"): (422, 422, 422, 422, 422, 401),  # checks a config, starts nothing
    ("POST", "/api/train/stop"): (409, 409, 409, 409, 403, 401),
    ("POST", "/api/train/reset"): (200, 200, 200, 200, 403, 401),
    ("POST", "/api/datasets/preview"): (422, 422, 422, 422, 403, 401),
    ("GET", "/api/datasets"): (200, 200, 200, 200, 200, 401),
    ("POST", "/api/datasets/upload"): (422, 422, 422, 422, 403, 401),  # no name given
    ("GET", "/v1/models"): (200, 200, 200, 200, 200, 401),
    ("POST", "/v1/chat/completions"): (400, 400, 400, 400, 403, 401),
    ("POST", "/v1/completions"): (400, 400, 400, 400, 403, 401),
}
# Bodies that pass the role rule and then fail (or succeed) harmlessly.
BODIES = {("PATCH", "/api/runs/{run_id}"): {"display_name": "renamed"}, ("POST", "/api/train/stop"): {"save": False},
          ("POST", "/api/runs/{run_id}/stop"): {"save": False},
          ("POST", "/api/runs/{run_id}/export"): {"format": "adapter"}, ("POST", "/api/runs/{run_id}/speak"): {"text": "hello"},
          ("POST", "/api/runs/{run_id}/queue"): {"position": 1}, ("POST", "/api/runs/{run_id}/push"): {"repo_id": "no-owner"}}


def add_keys(home) -> dict[str, str]:
    """A key per role-bearing caller in the home's store (before the server opens it); one revoked."""
    secrets = {}
    with Store(home / "tunelab.db") as store:
        for name, role in KEY_ROLES.items():
            secrets[name] = new_secret()
            store.add_api_key(name, role, secret_hash(secrets[name]))
        store.revoke_api_key("revoked")
    return secrets


def request(client: httpx.Client, method: str, path: str, run_id: int) -> httpx.Response:
    url = path.replace(RUN, str(run_id)).replace("{name}", "step-1.wav").replace("{sweep_id}", "1")
    if path.endswith("/progress"):  # a stream that never ends: its status is enough
        with client.stream(method, url) as response:
            return response
    return client.request(method, url, json=BODIES.get((method, path), {}))


def wait_until_ended(client: httpx.Client, run_id: int, limit_s: float = 60) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        run = client.get(f"/api/runs/{run_id}").json()
        if run["status"] != "running" and client.get("/api/train/status").json()["phase"] in FINAL_PHASES:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} still running after {limit_s} s")


def test_the_table_has_a_row_for_every_api_route_of_the_app(home):
    app = create_app(home=home, static_dir=None)
    try:
        assert set(api_routes(app)) == set(TABLE)
    finally:
        app.state.orchestrator.shutdown()
        app.state.store.close()


def test_an_app_with_an_unruled_api_route_is_refused_at_start_up():
    app = FastAPI()
    app.add_api_route("/api/new-thing", lambda: {}, methods=["POST"])
    with pytest.raises(RuntimeError, match="POST /api/new-thing"):
        apply_rules(app)


def test_every_caller_gets_its_expected_status_on_every_route(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    secrets = {**add_keys(home)}
    server = start_server(home=home, extra_env=scripted_worker_env())
    secrets["token"] = server.token
    with Store(home / "tunelab.db") as store:
        run_id = store.create_run(demo_run(), "demo", "alpaca", owned_by="alice")
    clients = {caller: server.client(token=secrets[caller]) for caller in CALLERS}
    wrong = []
    for (method, path), expected in TABLE.items():
        for caller, status in zip(CALLERS, expected):
            response = request(clients[caller], method, path, run_id)
            if response.status_code != status:
                wrong.append(f"{caller} {method} {path}: {response.status_code}, expected {status}")
            elif status == 403:
                assert str(run_id) in response.text if caller == "bob" else "viewer" in response.text, response.text
    assert wrong == [], "\n".join(wrong)
    # Who each caller is, as the page learns it: a key's own name, role and run owner.
    assert clients["token"].get("/api/me").json() == {"name": "local", "role": "admin", "owner": None}
    for caller in ("admin", "alice", "viewer"):
        assert clients[caller].get("/api/me").json() == {"name": caller, "role": KEY_ROLES[caller], "owner": caller}
    assert (store_row := Store(home / "tunelab.db").get_run(run_id))["status"] == "running"
    assert store_row["owner"] == "alice" and "owner" not in store_row["config"]


def test_members_manage_only_their_own_runs_and_admins_alone_use_opt_ins(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    secrets = add_keys(home)
    server = start_server(home=home, extra_env=scripted_worker_env(step_seconds=0.2),
                          extra_args=["--allow-remote-code"])
    as_ = {name: server.client(token=secret) for name, secret in secrets.items()}

    refused = as_["alice"].post("/api/train/start", json=demo_run(trust_remote_code=True))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_required"
    assert refused.json()["error"]["field"] == "trust_remote_code"

    run_id = start_run(as_["alice"], demo_run(max_steps=500))
    detail = as_["viewer"].get(f"/api/runs/{run_id}").json()
    assert detail["owner"] == "alice" and "owner" not in detail["config"]
    for caller in ("bob", "viewer"):
        answer = as_[caller].post("/api/train/stop", json={"save": False})
        assert answer.status_code == 403, answer.text
    assert "belongs to the key 'alice'" in as_["bob"].post("/api/train/stop", json={"save": False}).json()["error"]["message"]
    assert as_["alice"].post("/api/train/stop", json={"save": True}).status_code == 200
    assert wait_until_ended(as_["alice"], run_id)["status"] == "stopped"

    # Only alice (or an admin) resumes it, and the continuation is still hers.
    assert as_["bob"].post(f"/api/runs/{run_id}/resume").status_code == 403
    continuation = as_["admin"].post(f"/api/runs/{run_id}/resume")
    assert continuation.status_code == 200, continuation.text
    assert as_["admin"].get(f"/api/runs/{continuation.json()['job_id']}").json()["owner"] == "alice"
    assert as_["admin"].post("/api/train/stop", json={"save": False}).status_code == 200
    wait_until_ended(as_["admin"], continuation.json()["job_id"])

    # An admin may use the opt-in the server allows (here it gets as far as the path check).
    outside = demo_run(trust_remote_code=True, approved_remote_code_fingerprint="0" * 64,
                       local_datasets=[str(tmp_path / "elsewhere.jsonl")])
    admitted = as_["admin"].post("/api/train/start", json=outside)
    assert admitted.json()["error"]["code"] == "path_not_allowed", admitted.text
    assert admitted.json()["error"]["field"] == "local_datasets"
