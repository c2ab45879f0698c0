"""Every spelling of a run id but plain digits is a 422 on every route that takes one, for
every role, against a real server: the role check and the route read the id with one
parser, so no spelling can reach a route with the ownership check skipped (bob once
renamed alice's run as `PATCH /api/runs/1.0`).

The routes are test_roles.py's table (which must list every API route of the app); its
bodies get past each route's other checks, so a spelling the server read as run 1 would
answer as in that table (200, 403, 409, ...) instead of 422.
"""

from __future__ import annotations

import httpx

from sse_helpers import scripted_worker_env
from test_roles import BODIES, KEY_ROLES, RUN, TABLE, add_keys
from tunelab.store import Store

ROLE_CALLERS = ("token", "admin", "alice", "bob", "viewer")
# Each names run 1 to a lax reader: int(), a float, pydantic's lax int, or a percent-decoding router.
SPELLINGS = ("1.0", "01", "+1", "%201", "1e0", "%31", str(10**30), "-1", "1%2E0", "%2B1")


def send(client: httpx.Client, method: str, path: str, spelling: str) -> tuple[int, str]:
    """The status and the start of the body of the route's request with `spelling` as its
    run id (a progress stream's body is left unread: it never ends)."""
    url = path.replace(RUN, spelling).replace("{name}", "step-1.wav")
    with client.stream(method, url, json=BODIES.get((method, path), {})) as response:
        # The request line carried the spelling as written (the client did not normalise it).
        assert f"/api/runs/{spelling}" in response.request.url.raw_path.decode(), response.request.url
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response.status_code, "(a progress stream)"
        return response.status_code, response.read().decode(errors="replace")[:300]


def test_every_run_id_spelling_but_plain_digits_is_a_422_on_every_route_for_every_role(start_server, demo_run, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    secrets = add_keys(home)
    server = start_server(home=home, extra_env=scripted_worker_env())
    secrets["token"] = server.token
    with Store(home / "tunelab.db") as store:
        run_id = store.create_run(demo_run(), "demo", "alpaca", owned_by="alice", display_name="alice's run")
    assert run_id == 1  # what every spelling below would mean to a lax reader
    assert set(KEY_ROLES.values()) == {"admin", "member", "viewer"}
    clients = {caller: server.client(token=secrets[caller]) for caller in ROLE_CALLERS}
    routes = [route for route in TABLE if RUN in route[1]]
    assert len(routes) >= 15, routes

    wrong = []
    for method, path in routes:
        for spelling in SPELLINGS:
            for caller in ROLE_CALLERS:
                status, body = send(clients[caller], method, path, spelling)
                if status != 422 or '"field":"run_id"' not in body:
                    wrong.append(f"{caller} {method} {path} with {spelling!r}: {status} {body}")
    assert wrong == [], "\n".join(wrong)

    # The message says what a run id looks like.
    answer = clients["bob"].patch("/api/runs/1.0", json=BODIES[("PATCH", "/api/runs/{run_id}")]).json()
    assert "plain digits" in answer["error"]["message"] and "'1.0'" in answer["error"]["message"], answer

    # Nothing changed, and the plain spelling still meets the ownership check (the walk above proves something).
    with Store(home / "tunelab.db") as store:
        row = store.get_run(run_id)
    assert (row["display_name"], row["status"], row["owner"]) == ("alice's run", "running", "alice")
    refused = clients["bob"].patch(f"/api/runs/{run_id}", json={"display_name": "bob's now"})
    assert refused.status_code == 403 and "belongs to the key 'alice'" in refused.json()["error"]["message"]
    assert clients["alice"].patch(f"/api/runs/{run_id}", json={"display_name": "still alice's"}).status_code == 200
