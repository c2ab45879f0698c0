"""The download-stall watch on a real folder that grows, stops growing, or is complete."""

from __future__ import annotations

import queue
import time

from tunelab import events as ev
from tunelab.worker.context import WorkerContext
from tunelab.worker.stall import DownloadStallWatch


def _stalls(sent: queue.Queue) -> list[dict]:
    found = []
    while not sent.empty():
        event = sent.get()
        if event["type"] == ev.STALL:
            found.append(ev.parse(event))
    return found


def _repo(tmp_path):
    blobs = tmp_path / "models--org--name" / "blobs"
    blobs.mkdir(parents=True)
    return blobs


def test_a_download_that_stops_growing_is_reported_once(tmp_path):
    blobs = _repo(tmp_path)
    (blobs / "abc.incomplete").write_bytes(b"x" * 100)
    sent: queue.Queue = queue.Queue()
    with DownloadStallWatch(WorkerContext(sent), [blobs.parent], limit_seconds=0.5, poll_seconds=0.05) as watch:
        deadline = time.monotonic() + 20
        while not watch.reported and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # more polls after the first report must not send another
    stalls = _stalls(sent)
    assert len(stalls) == 1 and "no progress" in stalls[0]["message"]


def test_a_growing_download_is_not_a_stall(tmp_path):
    blobs = _repo(tmp_path)
    partial = blobs / "abc.incomplete"
    sent: queue.Queue = queue.Queue()
    with DownloadStallWatch(WorkerContext(sent), [blobs.parent], limit_seconds=2.0, poll_seconds=0.05):
        for _ in range(30):
            with partial.open("ab") as handle:
                handle.write(b"x" * 10)
            time.sleep(0.1)
        partial.rename(blobs / "abc")  # the download finishes; loading from disk may take long
        time.sleep(1.5)
    assert _stalls(sent) == []
