"""The event channel between a reporting rank and its launcher (real sockets on
loopback, no torch): only a client that knows the run's secret is heard, a line past
the bound ends the connection, stops sent early are delivered, and a client closes
promptly while its stop reader is blocked."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from tunelab import channel
from tunelab.channel import ChannelClient, ChannelListener

WAIT_S = 10


class Heard:
    """What the listener handed on: messages, and each end of a connection."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.closed = threading.Semaphore(0)
        self._cond = threading.Condition()

    def on_message(self, message: dict[str, Any]) -> None:
        with self._cond:
            self.messages.append(message)
            self._cond.notify_all()

    def on_closed(self) -> None:
        self.closed.release()

    def wait_for(self, count: int) -> list[dict[str, Any]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.messages) >= count, WAIT_S), self.messages
            return list(self.messages)


@pytest.fixture
def listener():
    made = ChannelListener()
    heard = Heard()
    made.serve(heard.on_message, heard.on_closed)
    yield made, heard
    made.close()


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def test_a_client_with_the_wrong_secret_is_refused_unheard(listener):
    made, heard = listener
    wrong = "00" * 32
    assert wrong != made.secret
    intruder = ChannelClient(made.address, wrong)  # the handshake itself goes through; the answer is wrong
    try:
        intruder.put({"type": "progress", "step": 99})
    except OSError:
        pass  # the listener may already have closed it
    assert _wait(lambda: made.refused == 1)
    with pytest.raises((channel.ChannelClosed, OSError)):
        intruder._lines.receive()  # closed by the listener, unread
    intruder.close()

    honest = ChannelClient(made.address, made.secret)  # the listener serves the next connection
    honest.put({"type": "progress", "step": 1})
    assert heard.wait_for(1) == [{"type": "progress", "step": 1}]
    honest.close()
    assert made.refused == 1


def test_a_client_that_never_answers_the_challenge_is_not_heard(listener):
    made, heard = listener
    with socket.create_connection(_host_port(made.address), timeout=WAIT_S) as raw:
        raw.recv(4096)  # the nonce
        raw.sendall(b'{"type": "progress", "step": 5}\n')  # an event instead of the answer
        assert raw.recv(4096) == b""  # closed
    assert _wait(lambda: made.refused == 1)
    assert heard.messages == []


def test_an_over_long_line_ends_the_connection(listener, monkeypatch):
    made, heard = listener
    monkeypatch.setattr(channel, "MAX_LINE_BYTES", 1024)  # read at each receive
    client = ChannelClient(made.address, made.secret)
    client.put({"type": "status", "message": "short"})
    client.put({"type": "status", "message": "x" * 4096})
    client.put({"type": "status", "message": "after"})
    assert heard.closed.acquire(timeout=WAIT_S), "the listener kept the connection"
    assert heard.messages == [{"type": "status", "message": "short"}]
    client.close()


def test_stops_sent_before_the_client_connects_arrive_after_it_connects(listener):
    made, _ = listener
    made.send({"type": "stop", "save": True})
    made.send({"type": "stop", "save": False})
    client = ChannelClient(made.address, made.secret)
    stops: list[dict[str, Any]] = []
    client.read_stops(stops.append)
    assert _wait(lambda: len(stops) == 2)
    assert stops == [{"type": "stop", "save": True}, {"type": "stop", "save": False}]
    made.send({"type": "stop", "save": False})  # and once connected, at once
    assert _wait(lambda: len(stops) == 3)
    client.close()


def test_a_client_closes_at_once_while_its_stop_reader_waits(listener):
    """The reporting rank closes its end after the run's last event while its stop
    reader is blocked reading; the close must not wait for the launcher to send or
    hang up (it did, until torchrun's 15 s grace ran out)."""
    made, heard = listener
    client = ChannelClient(made.address, made.secret)
    reader = client.read_stops(lambda _message: None)
    client.put({"type": "complete"})
    heard.wait_for(1)
    closer = threading.Thread(target=client.close, daemon=True)
    closer.start()
    closer.join(5)
    assert not closer.is_alive(), "closing the client waited on its own stop reader"
    reader.join(5)
    assert not reader.is_alive()
    assert heard.closed.acquire(timeout=WAIT_S)


def _wait(condition, timeout: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
