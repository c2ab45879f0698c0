"""Dataset upload and listing on a real server: a file streams into <home>/datasets and is
listed with its rows; a taken name gets a suffix and the first file is untouched; a body
over TUNELAB_UPLOAD_MAX_MB (declared, or only found out while it streams in), a name with
a folder in it or the wrong extension, and a file that is not what its extension says are
refused naming the field, and leave nothing behind."""

from __future__ import annotations

import json
import socket

import pytest

LIMIT_MB = "0.05"  # 52,428 bytes
ROWS = [{"instruction": f"Say {i}", "output": str(i)} for i in range(5)]
JSONL = "".join(json.dumps(row) + "\n" for row in ROWS).encode()


@pytest.fixture
def server(start_server):
    return start_server(extra_env={"TUNELAB_UPLOAD_MAX_MB": LIMIT_MB})


def contents(server) -> list[str]:
    folder = server.home / "datasets"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_an_upload_is_stored_listed_and_never_overwrites(server, demo_assets):
    with server.client() as client:
        first = client.post("/api/datasets/upload", params={"name": "mine.jsonl"}, content=JSONL)
        assert first.status_code == 201, first.text
        body = first.json()
        assert body["name"] == "mine.jsonl" and body["rows"] == 5 and body["columns"] == ["instruction", "output"]
        assert (server.home / "datasets" / "mine.jsonl").read_bytes() == JSONL
        second = client.post("/api/datasets/upload", params={"name": "mine.jsonl"}, content=b'{"text": "other"}\n')
        assert second.status_code == 201 and second.json()["name"] == "mine-2.jsonl"
        assert (server.home / "datasets" / "mine.jsonl").read_bytes() == JSONL
        listed = {f["name"]: f for f in client.get("/api/datasets").json()["files"]}
    assert listed["mine.jsonl"]["rows"] == 5 and listed["mine-2.jsonl"]["columns"] == ["text"]
    assert demo_assets.alpaca.name in listed  # the demo data root is listed too
    assert contents(server) == ["mine-2.jsonl", "mine.jsonl"]


def test_an_upload_over_the_bound_is_refused_and_leaves_nothing(server):
    big = JSONL * 2000  # about 1 MB
    with server.client() as client:
        declared = client.post("/api/datasets/upload", params={"name": "big.jsonl"}, content=big)
        # Without Content-Length the bound is found out while the body streams to disk.
        streamed = client.post("/api/datasets/upload", params={"name": "big.jsonl"},
                               content=(big[i:i + 8192] for i in range(0, len(big), 8192)))
    for answer in (declared, streamed):
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["field"] == "file" and "TUNELAB_UPLOAD_MAX_MB" in error["message"] and "0.05 MiB" in error["message"]
    assert contents(server) == []


@pytest.mark.parametrize(("name", "content", "field", "says"), [
    ("../escape.jsonl", JSONL, "name", "plain file name"),
    ("/tmp/abs.jsonl", JSONL, "name", "plain file name"),
    ("notes.txt", JSONL, "name", ".jsonl"),
    ("broken.jsonl", b'{"text": "fine"}\nnot json\n', "file", "line 2 is not JSON"),
    ("rows.json", b'{"no": "list"}', "file", "no list of rows"),
    ("fake.parquet", b"not parquet", "file", "PAR1"),
    ("empty.csv", b"", "file", "empty"),
])
def test_bad_uploads_name_the_field_and_leave_nothing(server, name, content, field, says):
    with server.client() as client:
        answer = client.post("/api/datasets/upload", params={"name": name}, content=content)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and says in error["message"], error
    assert contents(server) == []
    assert not (server.home / "escape.jsonl").exists()


def test_a_stalled_upload_times_out_and_leaves_nothing(start_server):
    server = start_server(extra_env={"TUNELAB_BODY_TIMEOUT_S": "1"})
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall((f"POST /api/datasets/upload?name=slow.jsonl HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Authorization: Bearer {server.token}\r\nContent-Length: 1000\r\n\r\n").encode() + JSONL[:20])
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body)["error"]["field"] == "file"
    assert contents(server) == []
