"""Speaking can be followed and cancelled: `POST /api/runs/{id}/speak?stream=true` reports
the audio tokens as they are written, and a client that goes away — from the progress
stream, or from the plain wav request — ends the speak child mid-generation (the server
says how far it had come, the child is gone), and the next request is served.

A finished run of the tiny text-to-speech model stands in for a trained one (its random
weights speak to the token limit, which is what lets a test cancel half-way)."""

from __future__ import annotations

import io
import json
import re
import socket
import time
from pathlib import Path

import psutil
import pytest
import soundfile
from run_helpers import finished_tts_run, tiny_tts_model

from tunelab.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
WAIT_S = 300  # loading torch in the child takes seconds on an idle machine, far more on a loaded one
CANCELLED = re.compile(r"speaking with run (\d+) was cancelled by its client (after (\d+) audio tokens of at most (\d+)|before it spoke)")


@pytest.fixture(scope="module")
def tts_model(tmp_path_factory) -> Path:
    return tiny_tts_model(tmp_path_factory.mktemp("tts"))


def _speaking_run(server, tts_model: Path) -> int:
    with Store(server.home / "tunelab.db") as store:
        return finished_tts_run(store, tts_model, str(tts_model))


def _speak_children(server) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(server.pid).children(recursive=True):
        try:
            if "tunelab.inference.speak_child" in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _cancelled_line(server, seen: int) -> re.Match:
    """The server's word that the speaking number `seen + 1` was cancelled (its log is the home's server-stderr.log)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = list(CANCELLED.finditer((server.home / "server-stderr.log").read_text()))
        if len(found) > seen:
            return found[seen]
        time.sleep(0.2)
    raise AssertionError("the server never said the speaking was cancelled")


def _speaks_again(client, run_id: int) -> None:
    """The next request is served (not refused as 'another text is being spoken'), to the end."""
    answer = client.post(f"/api/runs/{run_id}/speak", json={"text": "one", "max_new_tokens": 14}, timeout=WAIT_S)
    assert answer.status_code == 200 and answer.headers["content-type"] == "audio/wav", answer.text
    audio, rate = soundfile.read(io.BytesIO(answer.content))
    assert rate == 16000 and 0 < len(audio) <= 2 * 2048  # two frames at most


def test_leaving_the_progress_stream_ends_the_speaking_mid_generation(start_server, tts_model):
    server = start_server(log_level="info")
    run_id = _speaking_run(server, tts_model)
    client = server.client(timeout=WAIT_S)
    progress = []
    with client.stream("POST", f"/api/runs/{run_id}/speak", params={"stream": "true"},
                       json={"text": "one two three", "max_new_tokens": 1000}) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/x-ndjson")
        for line in answer.iter_lines():
            progress.append(json.loads(line))
            assert progress[-1]["type"] == "progress", progress[-1]
            if progress[-1]["tokens"] is not None:
                break  # the model has begun to speak: leave, as the page's Cancel does
    assert progress[0]["message"].startswith(f"speaking with run {run_id} on ")
    assert any(p["message"] == "loading the model" for p in progress)
    speaking = [p for p in progress if p["tokens"] is not None]
    assert speaking[-1]["max_tokens"] <= 1000 and speaking[-1]["tokens"] < speaking[-1]["max_tokens"]
    assert [p["elapsed_s"] for p in progress] == sorted(p["elapsed_s"] for p in progress)

    said = _cancelled_line(server, 0)
    assert int(said.group(1)) == run_id and said.group(3) is not None
    assert int(said.group(3)) < int(said.group(4))  # ended short of its limit
    assert _speak_children(server) == []  # said only once the child has ended
    _speaks_again(client, run_id)


def test_closing_the_plain_request_ends_the_speaking(start_server, tts_model):
    server = start_server(log_level="info")
    run_id = _speaking_run(server, tts_model)
    body = json.dumps({"text": "one two three", "max_new_tokens": 1000}).encode()
    port = int(server.base_url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"POST /api/runs/{run_id}/speak HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {server.token}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    deadline = time.monotonic() + WAIT_S
    while not _speak_children(server):
        assert time.monotonic() < deadline, "no speak child started"
        time.sleep(0.1)
    sock.close()  # the client goes away while the child works (loading or speaking)
    _cancelled_line(server, 0)
    assert _speak_children(server) == []
    _speaks_again(server.client(timeout=WAIT_S), run_id)
