"""Running the server: `serve(host, port)` (what `tunelab serve` calls) and
`python -m tunelab.server [--host H] [--port P] [--allow-remote-code]
[--allow-output-anywhere] [--allowed-host NAME ...]`.

The listening socket is bound here, before uvicorn starts, so `--port 0` works (the
chosen port is printed) and the printed URL is valid the moment it appears. Logs go to
stderr and to `<home>/logs/server.log`. Binding anything but loopback prints a warning:
the token is then the only thing between the network and your machine. A loopback
server answers only to loopback host names (see guards.py).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import logging.handlers
import socket
import sys

from tunelab import paths
from tunelab.server.auth import token_and_origin

log = logging.getLogger("tunelab.server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
LOG_FILE_BYTES = 5 * 2**20


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_warning(host: str) -> str | None:
    """The warning to print for a non-loopback bind, or None."""
    if is_loopback(host):
        return None
    return (f"WARNING: binding to {host} makes tunelab reachable from other machines; anyone who "
            "learns the API token can train on, read and delete your runs. Use --host 127.0.0.1 "
            "unless you mean it, and serve it behind TLS.")


def configure_logging(level: str) -> None:
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    to_file = logging.handlers.RotatingFileHandler(paths.logs_dir() / "server.log", maxBytes=LOG_FILE_BYTES, backupCount=3)
    to_stderr = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    root.setLevel(level.upper())
    for handler in (to_file, to_stderr):
        handler.setFormatter(formatter)
        root.addHandler(handler)


def bind_socket(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def page_url(host: str, port: int) -> str:
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"  # listening everywhere includes loopback, the address to open here
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, log_level: str = "info",
          allow_remote_code: bool = False, allow_output_anywhere: bool = False,
          allowed_hosts: list[str] | None = None) -> None:
    """Serve the API and the web page until interrupted (Ctrl-C or SIGTERM).
    `allow_remote_code` / `allow_output_anywhere`: let API callers set trust_remote_code /
    allow_output_outside_root. `allowed_hosts`: more Host names to answer to."""
    import uvicorn

    from tunelab.server.app import create_app
    from tunelab.server.guards import allowed_hosts_for

    configure_logging(log_level)
    warning = bind_warning(host)
    if warning:
        print(warning, file=sys.stderr, flush=True)
        log.warning("listening on non-loopback address %s", host)
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        print(f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port", file=sys.stderr)
        raise SystemExit(2) from None
    port = sock.getsockname()[1]
    token, origin = token_and_origin()
    # A served lab starts runs again and again: keep a worker warm for the next one.
    app = create_app(token=token, prewarm=True, allow_remote_code=allow_remote_code,
                     allow_output_anywhere=allow_output_anywhere, allowed_hosts=allowed_hosts_for(host, allowed_hosts or []))
    url = page_url(host, port)
    print(f"tunelab serving on {url}", flush=True)
    if origin == "created":
        # Shown this once; later starts point at `tunelab token` instead of repeating it.
        print(f"open {url}#token={token}", flush=True)
    else:
        print(f"open {url} (API token: `tunelab token`{', or TUNELAB_TOKEN' if origin == 'env' else ''})", flush=True)
    config = uvicorn.Config(app, log_config=None, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=5, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tunelab.server", description="Serve the tunelab API and web page.")
    parser.add_argument("--host", default=DEFAULT_HOST, help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port; 0 picks a free one and prints it")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--allow-remote-code", action="store_true",
                        help="let API callers set trust_remote_code (runs code from model repositories)")
    parser.add_argument("--allow-output-anywhere", action="store_true",
                        help="let API callers set allow_output_outside_root (write outside the outputs root)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="also answer to this Host name (repeatable; '*' answers to any)")
    args = parser.parse_args(argv)
    serve(args.host, args.port, log_level=args.log_level, allow_remote_code=args.allow_remote_code,
          allow_output_anywhere=args.allow_output_anywhere, allowed_hosts=args.allowed_host)
