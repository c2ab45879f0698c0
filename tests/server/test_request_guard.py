"""Every request passes the guard first: a body over 1 MiB is a 413 (declared or
streamed), and a server on loopback answers only to loopback host names, so a web page
whose DNS name was pointed at 127.0.0.1 (DNS rebinding) gets nothing, token or not."""

from __future__ import annotations

import httpx
import pytest

TOO_BIG = 2 * 2**20


def _assert_refused(response: httpx.Response, status: int, code: str, field: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["field"] == field and error["message"]


def test_a_body_over_the_limit_is_a_413_in_the_error_shape(live_server):
    client = live_server.client()
    big = b'{"model_name": "' + b"x" * TOO_BIG + b'"}'
    declared = client.post("/api/train/start", content=big, headers={"Content-Type": "application/json"})
    _assert_refused(declared, 413, "too_large", "body")

    def chunks():
        for _ in range(TOO_BIG // 65536):
            yield b" " * 65536

    streamed = client.post("/api/datasets/preview", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in streamed.request.headers
    _assert_refused(streamed, 413, "too_large", "body")
    assert client.get("/api/health").status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.evil.example"])
def test_a_foreign_host_name_is_refused_even_with_the_token(live_server, host):
    for client in (live_server.client(), live_server.client(token=None)):
        for path in ("/api/runs", "/api/health", "/"):
            _assert_refused(client.get(path, headers={"Host": host}), 400, "host_not_allowed", "Host")


def test_loopback_host_names_are_served(live_server):
    port = live_server.base_url.rsplit(":", 1)[1]
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "LOCALHOST", "127.0.0.1"):
        assert live_server.client().get("/api/runs", headers={"Host": host}).status_code == 200, host


def test_more_host_names_can_be_allowed(start_server):
    server = start_server(extra_env={"TUNELAB_PREWARM": "0", "TUNELAB_ALLOWED_HOSTS": "lab.example"},
                          extra_args=["--allowed-host", "gpu-box.local"])
    client = server.client()
    for host in ("lab.example", "gpu-box.local:8765", "localhost"):
        assert client.get("/api/runs", headers={"Host": host}).status_code == 200, host
    _assert_refused(client.get("/api/runs", headers={"Host": "evil.example"}), 400, "host_not_allowed", "Host")
