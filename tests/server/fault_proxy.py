"""A loopback TCP proxy in front of a real server that breaks one download for real.

The first response to a request whose head contains `trigger` is passed on for `after`
bytes (status line and headers included), then the connection is cut (`mode="cut"`: both
sockets closed, as a dropped network would) or left hanging (`mode="stall"`: nothing more
is sent, the sockets stay open, so the client waits until it is killed). Every other
response passes whole. The request heads seen are kept in `requests`, so a test can say
which byte range a client asked for.
"""

from __future__ import annotations

import socket
import threading


class FaultyProxy:
    def __init__(self, target_port: int, trigger: bytes, after: int, mode: str = "cut"):
        assert mode in ("cut", "stall")
        self.target_port, self.trigger, self.after, self.mode = target_port, trigger, after, mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[str] = []
        self.fired = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def ranges_asked(self) -> list[str]:
        """The Range header of every request seen for the trigger, in order ('' for none)."""
        found = []
        for head in self.requests:
            if self.trigger.decode() in head:
                lines = [line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.lower().startswith("range:")]
                found.append(lines[0] if lines else "")
        return found

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets |= {client, upstream}
            armed = threading.Event()  # the response now on its way is the one to break
            threading.Thread(target=self._requests, args=(client, upstream, armed), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, armed), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, armed: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                head = data.split(b"\r\n\r\n", 1)[0]
                if head[:4] in (b"GET ", b"POST", b"HEAD"):
                    self.requests.append(head.decode("latin-1"))
                    if self.trigger in head and not self.fired.is_set():
                        armed.set()
                upstream.sendall(data)
        except OSError:
            pass
        self._close(client, upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, armed: threading.Event) -> None:
        sent = 0
        try:
            while data := upstream.recv(65536):
                if armed.is_set():
                    data = data[:max(self.after - sent, 0)]
                    sent += len(data)
                    client.sendall(data)
                    if sent >= self.after:
                        self.fired.set()
                        if self.mode == "stall":
                            return  # nothing more, and the sockets stay open
                        break
                else:
                    client.sendall(data)
        except OSError:
            pass
        self._close(client, upstream)

    def _close(self, *socks: socket.socket) -> None:
        for sock in socks:
            with self._lock:
                self._sockets.discard(sock)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()
        with self._lock:
            open_now = list(self._sockets)
        self._close(*open_now)
