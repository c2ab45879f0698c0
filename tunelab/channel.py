"""The event channel between a run's reporting rank and the process that launched it.

A rank started by torchrun or Ray is not a child the orchestrator spawned, so its
events cannot use the multiprocessing queue. They travel over one TCP connection as
JSON lines (never pickle: nothing is unpickled from a socket), after a challenge: the
listener sends a random nonce, the rank answers HMAC-SHA256(run secret, nonce), and a
connection that answers wrong is closed unread. The secret is made per run and reaches
the ranks only through their environment. Stop requests go the other way on the same
connection. Lines longer than MAX_LINE_BYTES end the connection.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import threading
from typing import Any, Callable

MAX_LINE_BYTES = 1 << 20
HANDSHAKE_TIMEOUT_S = 10.0
ADDRESS_ENV = "TUNELAB_CHANNEL"
SECRET_ENV = "TUNELAB_CHANNEL_SECRET"


class ChannelClosed(Exception):
    pass


def _answer(secret: str, nonce: str) -> str:
    return hmac.new(bytes.fromhex(secret), nonce.encode(), hashlib.sha256).hexdigest()


class _Lines:
    """JSON lines over a socket, with a bound on each line."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._reader = sock.makefile("rb")
        self._send_lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        with self._send_lock:
            self.sock.sendall(data)

    def receive(self) -> dict[str, Any]:
        line = self._reader.readline(MAX_LINE_BYTES + 1)
        if not line:
            raise ChannelClosed("the other end closed the channel")
        if len(line) > MAX_LINE_BYTES or not line.endswith(b"\n"):
            raise ChannelClosed("a message longer than the channel allows")
        message = json.loads(line)
        if not isinstance(message, dict):
            raise ValueError("a channel message is not an object")
        return message

    def close(self) -> None:
        # Shut the socket down first: a thread blocked reading holds the reader's lock, and
        # closing the reader would wait for that read to end (until the other end closes).
        for closing in (lambda: self.sock.shutdown(socket.SHUT_RDWR), self._reader.close, self.sock.close):
            try:
                closing()
            except OSError:
                pass


class ChannelListener:
    """The launcher's end: listens, authenticates the reporting rank, hands its messages
    to `on_message`, and sends it stop requests."""

    def __init__(self, host: str = "127.0.0.1"):
        self.secret = secrets.token_hex(32)
        self._server = socket.create_server((host, 0))
        self.address = f"{host}:{self._server.getsockname()[1]}"
        self._peer: _Lines | None = None
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.refused = 0  # connections that failed the challenge
        self.connected = threading.Event()

    def environment(self) -> dict[str, str]:
        return {ADDRESS_ENV: self.address, SECRET_ENV: self.secret}

    def serve(self, on_message: Callable[[dict[str, Any]], None], on_closed: Callable[[], None]) -> threading.Thread:
        thread = threading.Thread(target=self._accept_loop, args=(on_message, on_closed), name="tunelab-channel", daemon=True)
        thread.start()
        return thread

    def _accept_loop(self, on_message: Callable[[dict[str, Any]], None], on_closed: Callable[[], None]) -> None:
        while True:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return  # closed
            lines = self._authenticate(sock)
            if lines is None:
                self.refused += 1
                continue
            with self._lock:
                self._peer = lines
                pending, self._pending = self._pending, []
            self.connected.set()
            for message in pending:
                self._send_quietly(lines, message)
            try:
                while True:
                    on_message(lines.receive())
            except (ChannelClosed, OSError, ValueError):
                pass
            finally:
                with self._lock:
                    self._peer = None
                lines.close()
                on_closed()

    def _authenticate(self, sock: socket.socket) -> _Lines | None:
        lines = _Lines(sock)
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT_S)
            nonce = secrets.token_hex(16)
            lines.send({"nonce": nonce})
            reply = lines.receive()
            if not hmac.compare_digest(str(reply.get("auth", "")), _answer(self.secret, nonce)):
                raise ValueError("wrong answer")
            sock.settimeout(None)
            return lines
        except (ChannelClosed, OSError, ValueError):
            lines.close()
            return None

    def send(self, message: dict[str, Any]) -> None:
        """To the reporting rank now, or as soon as it connects."""
        with self._lock:
            peer = self._peer
            if peer is None:
                self._pending.append(message)
                return
        self._send_quietly(peer, message)

    @staticmethod
    def _send_quietly(peer: _Lines, message: dict[str, Any]) -> None:
        try:
            peer.send(message)
        except OSError:
            pass  # the rank is gone; its end shows up on the reading side

    def close(self) -> None:
        try:
            self._server.close()
        except OSError:
            pass
        with self._lock:
            if self._peer is not None:
                self._peer.close()


class ChannelClient:
    """The reporting rank's end: a queue-like `put` for events, stop messages to `on_stop`."""

    def __init__(self, address: str, secret: str):
        host, _, port = address.rpartition(":")
        sock = socket.create_connection((host, int(port)), timeout=HANDSHAKE_TIMEOUT_S)
        self._lines = _Lines(sock)
        challenge = self._lines.receive()
        self._lines.send({"auth": _answer(secret, str(challenge.get("nonce", "")))})
        sock.settimeout(None)

    def put(self, event: dict[str, Any]) -> None:
        self._lines.send(event)

    def read_stops(self, on_stop: Callable[[dict[str, Any]], None]) -> threading.Thread:
        def loop() -> None:
            try:
                while True:
                    on_stop(self._lines.receive())
            except (ChannelClosed, OSError, ValueError):
                return

        thread = threading.Thread(target=loop, name="tunelab-channel-stops", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._lines.close()
