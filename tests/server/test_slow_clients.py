"""Slow clients are cut off: a raw socket that trickles a request's head, or its body, one
byte at a time is closed by the server once the bound passes (bounds set short here by
TUNELAB_HEADER_TIMEOUT_S / TUNELAB_BODY_TIMEOUT_S), while a client sending at once, and a
keep-alive connection between requests, are served as before.

The trickle goes on far longer than the bound; a server without the bound keeps reading
it, and the test fails when the trickle runs out with the connection still open.
"""

from __future__ import annotations

import socket
import time
from typing import Iterator
from urllib.parse import urlsplit

import pytest

from conftest import NO_PREWARM, TOKEN, LiveServer, _launch

BOUND_S = 2.0
TRICKLE_S = 0.1
# Long past the bound: how long a trickle goes on before the test gives up on the server.
GIVE_UP_S = 30.0


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory, demo_assets) -> Iterator[LiveServer]:
    bounds = {"TUNELAB_HEADER_TIMEOUT_S": str(BOUND_S), "TUNELAB_BODY_TIMEOUT_S": str(BOUND_S)}
    server = _launch(tmp_path_factory.mktemp("slow-clients"), TOKEN, [demo_assets.root], {**NO_PREWARM, **bounds})
    yield server
    server.stop()


def connect(server) -> socket.socket:
    address = urlsplit(server.base_url)
    sock = socket.create_connection((address.hostname, address.port), timeout=GIVE_UP_S)
    sock.settimeout(TRICKLE_S)
    return sock


def trickle(sock: socket.socket, data: bytes) -> bytes:
    """Send `data` a byte at a time until the server closes the connection; what it answered.
    Fails when the data (or GIVE_UP_S) runs out first."""
    answer = b""
    deadline = time.monotonic() + GIVE_UP_S
    for byte in data:
        assert time.monotonic() < deadline, "the server kept a trickling connection open"
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return answer
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            return answer
        if not chunk:
            return answer
        answer += chunk
    raise AssertionError(f"the server kept a trickling connection open; it answered {answer!r}")


def whole_response(sock: socket.socket) -> bytes:
    """One response read off the socket: its head, then Content-Length bytes of body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or pytest.fail(f"closed after {data!r}")
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        body += sock.recv(65536) or pytest.fail(f"closed after {data + body!r}")
    return head + b"\r\n\r\n" + body


def test_a_trickled_request_head_is_cut_off(bounded):
    head = b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 1000 + b"\r\n\r\n"
    with connect(bounded) as sock:
        assert trickle(sock, head) == b""  # closed without an answer
    assert bounded.client().get("/api/health").status_code == 200


def test_a_trickled_request_body_is_a_408_and_the_connection_closes(bounded):
    body = b'{"model_name": "' + b"a" * 1000 + b'"}'
    head = (f"POST /api/train/start HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with connect(bounded) as sock:
        sock.sendall(head)
        answer = trickle(sock, body)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'"request_timeout"' in answer and b"TUNELAB_BODY_TIMEOUT_S" in answer


def test_prompt_clients_and_kept_alive_connections_are_served(bounded):
    with connect(bounded) as sock:
        sock.settimeout(GIVE_UP_S)
        for _ in range(2):  # the second request on the same connection, after a pause below the bound
            sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert whole_response(sock).startswith(b"HTTP/1.1 200 ")
            time.sleep(BOUND_S / 10)
