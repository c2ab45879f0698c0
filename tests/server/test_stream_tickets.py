"""Stream tickets, through a real server: a ticket opens the one stream it names, once, as
the caller who asked for it (a revoked key's ticket opens nothing, a member's ticket for its
run opens no other run), and neither the token nor a ticket is accepted anywhere else or
written to the server's log. Expiry is the TicketBook's own, read with a clock it is given."""

from __future__ import annotations

import httpx
import pytest

from sse_helpers import iter_sse
from test_roles import add_keys
from tunelab.server.stream_tickets import TicketBook
from tunelab.store import Store


def ticket_for(client: httpx.Client, run_id: int | None = None) -> dict:
    answer = client.post("/api/stream-tickets", json={} if run_id is None else {"run_id": run_id})
    assert answer.status_code == 200, answer.text
    return answer.json()


def open_status(base_url: str, url: str) -> int:
    """Open a stream with no header at all (as EventSource does); its status, read from the
    first event for a stream that opened (so the server really served it)."""
    with httpx.Client(base_url=base_url, timeout=30) as bare, bare.stream("GET", url) as response:
        if response.status_code == 200:
            assert next(iter_sse(response)).retry is not None  # the stream's first line
        return response.status_code


@pytest.fixture
def keyed(start_server, demo_run, tmp_path):
    """A server on a home with keys (alice and bob are members; one key revoked) and a
    running row owned by each member (rows made after the start, so none is an orphan)."""
    home = tmp_path / "home"
    home.mkdir()
    secrets = add_keys(home)
    server = start_server(home=home, log_level="debug")
    with Store(home / "tunelab.db") as store:
        runs = {owner: store.create_run(demo_run(), "demo", "alpaca", owned_by=owner) for owner in ("alice", "bob")}
    clients = {name: server.client(token=secret) for name, secret in secrets.items()}
    clients["token"] = server.client()
    return server, secrets, clients, runs


def test_a_ticket_opens_its_own_stream_once_and_nothing_else(keyed):
    server, _, clients, runs = keyed
    answer = ticket_for(clients["token"])
    assert answer["url"] == f"/api/train/progress?ticket={answer['ticket']}"
    assert server.token not in answer["url"] and 0 < answer["expires_in"] <= 60
    assert open_status(server.base_url, answer["url"]) == 200
    assert open_status(server.base_url, answer["url"]) == 401  # used once already

    # A ticket tried anywhere but its own stream is refused there, and is burned by trying.
    other = ticket_for(clients["token"])["ticket"]
    assert open_status(server.base_url, f"/api/runs/{runs['alice']}/progress?ticket={other}") == 401
    assert open_status(server.base_url, f"/api/train/progress?ticket={other}") == 401
    for method, path in (("GET", "/api/train/status"), ("POST", "/api/train/reset"), ("GET", "/api/runs")):
        fresh = ticket_for(clients["token"])["ticket"]
        assert httpx.request(method, f"{server.base_url}{path}", params={"ticket": fresh}).status_code == 401
    # Made-up tickets, and a ticket beside a wrong header, open nothing.
    assert open_status(server.base_url, "/api/train/progress?ticket=tlt_made-up") == 401
    fresh = ticket_for(clients["token"])["url"]
    with server.client(token="wrong").stream("GET", fresh) as response:
        assert response.status_code == 401


def test_the_token_in_the_url_opens_nothing_not_even_the_stream(keyed):
    server, secrets, _, runs = keyed
    for path in ("/api/train/progress", f"/api/runs/{runs['alice']}/progress"):
        for credential in (server.token, secrets["alice"]):
            assert open_status(server.base_url, f"{path}?token={credential}") == 401
            assert open_status(server.base_url, f"{path}?ticket={credential}") == 401


def test_a_members_ticket_opens_the_run_it_names_and_no_other_members_run(keyed):
    server, _, clients, runs = keyed
    own = ticket_for(clients["alice"], runs["alice"])
    assert own["url"] == f"/api/runs/{runs['alice']}/progress?ticket={own['ticket']}"
    wrong_run = own["url"].replace(f"/runs/{runs['alice']}/", f"/runs/{runs['bob']}/")
    assert open_status(server.base_url, wrong_run) == 401
    assert open_status(server.base_url, own["url"]) == 401  # burned by the try above

    own = ticket_for(clients["alice"], runs["alice"])
    assert open_status(server.base_url, own["url"]) == 200
    # Reading any run's stream is every role's (as with the header): a viewer's ticket works too.
    assert open_status(server.base_url, ticket_for(clients["viewer"], runs["bob"])["url"]) == 200
    # Tickets are asked for with a key that is still active, for a run that exists.
    assert clients["revoked"].post("/api/stream-tickets", json={}).status_code == 401
    missing = clients["alice"].post("/api/stream-tickets", json={"run_id": 999_999})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found"
    for bad in ({"run_id": 0}, {"run_id": -1}, {"run_id": 1.5}, {"run": 1}):
        refused = clients["alice"].post("/api/stream-tickets", json=bad)
        assert refused.status_code == 422 and refused.json()["error"]["field"] in ("run_id", "run"), bad


def test_a_key_revoked_after_its_ticket_was_issued_opens_nothing(keyed):
    server, _, clients, runs = keyed
    tickets = [ticket_for(clients["alice"], runs["alice"])["url"], ticket_for(clients["alice"])["url"]]
    with Store(server.home / "tunelab.db") as store:
        store.revoke_api_key("alice")  # what `tunelab keys revoke alice` does
    for url in tickets:
        assert open_status(server.base_url, url) == 401
    assert open_status(server.base_url, ticket_for(clients["bob"], runs["bob"])["url"]) == 200


def test_tickets_and_the_token_stay_out_of_the_server_log(keyed):
    server, secrets, clients, runs = keyed
    used = [ticket_for(clients["token"]), ticket_for(clients["alice"], runs["alice"])]
    for answer in used:
        assert open_status(server.base_url, answer["url"]) == 200
        assert open_status(server.base_url, answer["url"]) == 401
    server.stop()
    log = (server.home / "server-stderr.log").read_text()
    assert "tunelab" in log  # the debug log was written: its silence about secrets means something
    for secret in [server.token, secrets["alice"], *(a["ticket"] for a in used)]:
        assert secret not in log


def test_a_ticket_expires_unused_and_old_ones_are_pruned():
    now = [1000.0]
    book = TicketBook(ttl_s=60, clock=lambda: now[0], max_outstanding=3)
    ticket = book.issue(role="admin", key_name=None, key_hash=None, path="/api/train/progress")
    now[0] += 59.9
    kept = book.issue(role="member", key_name="alice", key_hash="ab" * 32, path="/api/runs/1/progress")
    assert book.redeem(ticket, "/api/train/progress") is not None
    now[0] += 60.0
    assert book.redeem(kept, "/api/runs/1/progress") is None  # expired unused
    # Never more than max_outstanding kept: the oldest unused go first.
    many = [book.issue(role="admin", key_name=None, key_hash=None, path="/api/train/progress") for _ in range(5)]
    assert book.outstanding() == 3
    assert book.redeem(many[0], "/api/train/progress") is None
    assert book.redeem(many[-1], "/api/train/progress").role == "admin"
    now[0] += 61
    assert book.outstanding() == 0
