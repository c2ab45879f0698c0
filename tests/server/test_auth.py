"""The API token: created once with mode 0600, overridable, required by every route but
health, compared exactly; and the loopback-only default."""

from __future__ import annotations

import stat

import httpx
import pytest

from tunelab.server.auth import load_or_create_token, token_and_origin
from tunelab.server.main import bind_warning

# Path parameters filled in when every documented route is called.
SAMPLE_PATH_VALUES = {"run_id": "1", "name": "step-1.wav", "sweep_id": "1"}


def documented_routes(server) -> list[tuple[str, str]]:
    schema = httpx.get(server.base_url + "/openapi.json").json()
    routes = []
    for path, operations in schema["paths"].items():
        for method in operations:
            routes.append((method.upper(), path.format(**SAMPLE_PATH_VALUES)))
    return routes


def test_every_route_but_health_needs_the_token(live_server):
    routes = documented_routes(live_server)
    assert len(routes) >= 12  # the whole API is documented, so the loop below covers it
    anonymous, wrong = live_server.client(token=None), live_server.client(token="not-the-token")
    checked = 0
    for method, path in routes:
        if path == "/api/health":
            continue
        for client in (anonymous, wrong):
            response = client.request(method, path, json={})
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"] == "Bearer"
        checked += 1
    assert checked == len(routes) - 1


def test_a_token_that_only_shares_a_prefix_is_refused(live_server):
    for near_miss in (live_server.token[:-1], live_server.token + "x", live_server.token.upper()):
        assert live_server.client(token=near_miss).get("/api/train/status").status_code == 401
    assert live_server.client().get("/api/train/status").status_code == 200


def test_health_is_public_but_its_details_are_not(live_server):
    public = httpx.get(live_server.base_url + "/api/health")
    assert public.status_code == 200 and public.json()["status"] == "ok"
    assert "pid" not in public.json()
    assert httpx.get(live_server.base_url + "/api/health?detail=1").status_code == 401
    detail = live_server.client().get("/api/health", params={"detail": 1}).json()
    assert detail["pid"] == live_server.pid


def test_no_route_takes_the_token_from_the_url_the_progress_stream_neither(live_server):
    # A browser's EventSource opens the stream with a stream ticket (test_stream_tickets.py).
    anonymous = live_server.client(token=None)
    assert anonymous.get("/api/train/status", params={"token": live_server.token}).status_code == 401
    with anonymous.stream("GET", "/api/train/progress", params={"token": live_server.token}) as response:
        assert response.status_code == 401
    with live_server.client().stream("GET", "/api/train/progress") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")


def test_unknown_api_paths_need_the_token_too(live_server):
    assert live_server.client(token=None).get("/api/secret-looking-path").status_code == 401
    assert live_server.client().get("/api/secret-looking-path").status_code == 404


def test_token_is_created_once_private_and_printed_once(start_server, tmp_path):
    home = tmp_path / "fresh-home"
    first = start_server(home=home, token=None)
    token_file = home / "token"
    token = token_file.read_text().strip()
    assert len(token) >= 32
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert any(line.endswith(f"/#token={token}") and line.startswith("open http://127.0.0.1:") for line in first.banner)
    assert first.client(token=token).get("/api/runs").status_code == 200
    first.stop()

    second = start_server(home=home, token=None)
    assert token_file.read_text().strip() == token  # reused, not replaced
    assert not any(token in line for line in second.banner)  # printed only when created
    assert second.client(token=token).get("/api/runs").status_code == 200


def test_environment_token_overrides_the_file(start_server, tmp_path):
    home = tmp_path / "home-with-file"
    home.mkdir()
    (home / "token").write_text("file-token\n")
    server = start_server(home=home, token="env-token")
    assert server.client(token="env-token").get("/api/runs").status_code == 200
    assert server.client(token="file-token").get("/api/runs").status_code == 401


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_loopback_binds_do_not_warn(host):
    assert bind_warning(host) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::"])
def test_other_binds_warn(host):
    assert "reachable from other machines" in bind_warning(host)


def test_an_empty_or_loose_token_file_is_repaired(home):
    token_file = home / "token"
    token_file.write_text("")  # e.g. left behind by a crash
    token, origin = token_and_origin()
    assert origin == "created" and len(token) >= 32
    assert token_file.read_text().strip() == token
    token_file.chmod(0o644)
    assert load_or_create_token() == token
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
