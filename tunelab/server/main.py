"""Running the server: `serve(host, port)` (what `tunelab serve` calls) and
`python -m tunelab.server [--host H] [--port P] [--allow-remote-code]
[--allow-output-anywhere] [--allow-ray] [--allow-multi-node] [--allow-image-urls] [--allowed-host NAME ...]
[--max-queued-per-key N]`.

The listening socket is bound here, before uvicorn starts, so `--port 0` works (the
chosen port is printed) and the printed URL is valid the moment it appears. Logs go to
stderr and to `<home>/logs/server.log`. Binding anything but loopback prints a warning:
the token is then the only thing between the network and your machine. A loopback
server answers only to loopback host names (see guards.py). While serving,
`<home>/server.json` says where (see `discovery`), so the CLI hands its runs to us.

SIGTERM, SIGHUP and Ctrl-C mean stop-and-save (`GracefulServer`): the server keeps
answering (health says "shutting_down", with 503) while the active run stops at its
next step and saves, within TUNELAB_SHUTDOWN_GRACE_S (default 20 s); then it exits 0.
A second signal cancels the run instead; a third exits at once. See docs/DEPLOY.md.
A client slow to send a request's head or body is cut off (slow_clients.py).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import logging.handlers
import os
import signal
import socket
import sys
import threading
from typing import Any, Iterator

import uvicorn

from tunelab import paths
from tunelab.orchestrator.watchdog import shutdown_grace_s
from tunelab.server.auth import token_and_origin
from tunelab.server.discovery import advertise
from tunelab.server.guards import allowed_hosts_for, is_loopback
from tunelab.server.slow_clients import HeadDeadlineProtocol

log = logging.getLogger("tunelab.server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
LOG_FILE_BYTES = 5 * 2**20


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


class GracefulServer(uvicorn.Server):
    """uvicorn, except that a shutdown signal first stops and saves the active run.

    uvicorn would stop serving at once and leave the run to the lifespan's shutdown,
    which can only end the worker. Here the first signal starts the stop-and-save on a
    thread and the server keeps serving (the live stream shows the run's end, health
    says "shutting_down") until the run is recorded; only then does uvicorn shut down."""

    def __init__(self, config: uvicorn.Config, orchestrator: Any, grace_s: float):
        super().__init__(config)
        self._orchestrator = orchestrator
        self._grace_s = grace_s
        self._signals = 0

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn listens for SIGINT and SIGTERM only; a closed terminal or a dropped SSH
        # session sends SIGHUP, which must not end a training server without a save either.
        if threading.current_thread() is not threading.main_thread():
            with super().capture_signals():
                yield
            return
        previous = signal.signal(signal.SIGHUP, self.handle_exit)
        try:
            with super().capture_signals():
                yield
        finally:
            signal.signal(signal.SIGHUP, previous)

    def handle_exit(self, sig: int, frame: Any) -> None:
        # A signal handler must not block: the waiting happens on threads.
        self._signals += 1
        name = signal.Signals(sig).name
        if self._signals == 1:
            threading.Thread(target=self._stop_and_exit, args=(name,), name="tunelab-shutdown", daemon=True).start()
        elif self._signals == 2:
            threading.Thread(target=self._cancel, args=(name,), name="tunelab-shutdown-cancel", daemon=True).start()
        else:
            self.should_exit = self.force_exit = True

    def _stop_and_exit(self, name: str) -> None:
        try:
            run_id = self._orchestrator.stop_for_shutdown(self._grace_s)
            if run_id is not None:
                log.warning("%s: stopping run %s at its next step and saving a checkpoint (within %g s); "
                            "send it again to cancel the run instead", name, run_id, self._grace_s)
                self._orchestrator.wait_idle(self._grace_s)
        except Exception:
            log.exception("stopping the active run for shutdown failed")
        finally:
            self.should_exit = True

    def _cancel(self, name: str) -> None:
        from tunelab.orchestrator import OrchestratorError

        log.warning("%s again: cancelling the active runs; nothing more is saved", name)
        for run_id in self._orchestrator.active_run_ids():
            try:
                self._orchestrator.stop_run(run_id, save=False)
            except OrchestratorError as exc:
                log.warning("cancel of run %s not sent: %s", run_id, exc)


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, log_level: str = "info",
          allow_remote_code: bool = False, allow_unpinned_remote_code: bool = False,
          allow_output_anywhere: bool = False, allow_ray: bool = False,
          allow_multi_node: bool = False, allow_reward_code: bool = False, allow_image_urls: bool = False,
          allowed_hosts: list[str] | None = None, max_queued_per_key: int | None = None) -> None:
    """Serve the API and the web page until a signal (Ctrl-C, SIGTERM, SIGHUP) ends it,
    after stopping and saving the active run. `allow_remote_code` / `allow_output_anywhere`:
    let API callers set trust_remote_code (with approved_remote_code_fingerprint;
    `allow_unpinned_remote_code`: without it too) / allow_output_outside_root; `allow_ray`: ray_address;
    `allow_reward_code`: a python reward file (in the data roots); `allow_image_urls`: runs
    download images their data names by http(s) URL. `allowed_hosts`:
    more Host names to answer to. `max_queued_per_key`: how many queued runs one key may
    have waiting (None: TUNELAB_MAX_QUEUED_PER_KEY, else 20)."""
    from tunelab.server.app import create_app
    from tunelab.server.queue_cap import configured_cap

    try:
        max_queued_per_key = configured_cap(max_queued_per_key)
    except ValueError as exc:
        print(f"cannot serve: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
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
    # Inherited by every worker and preview this server starts: image files named inside
    # a run's data must lie in the data roots, as the data files do.
    os.environ[paths.CONFINE_READS_ENV] = "1"
    # Likewise inherited: whether those runs may fetch images named by URL (the flag alone decides).
    if allow_image_urls:
        os.environ[paths.IMAGE_URLS_ENV] = "1"
    else:
        os.environ.pop(paths.IMAGE_URLS_ENV, None)
    # A served lab starts runs again and again: keep a worker warm for the next one.
    app = create_app(token=token, prewarm=True, allow_remote_code=allow_remote_code,
                     allow_unpinned_remote_code=allow_unpinned_remote_code,
                     allow_output_anywhere=allow_output_anywhere, allow_ray=allow_ray,
                     allow_multi_node=allow_multi_node, allow_reward_code=allow_reward_code,
                     allowed_hosts=allowed_hosts_for(host, allowed_hosts or []), max_queued_per_key=max_queued_per_key)
    url = page_url(host, port)
    # `tunelab train` on this home finds the server through <home>/server.json and submits to it.
    advertise(app, url, host, port)
    print(f"tunelab serving on {url}", flush=True)
    if origin == "created":
        # Shown this once; later starts point at `tunelab token` instead of repeating it.
        print(f"open {url}#token={token}", flush=True)
    else:
        print(f"open {url} (API token: `tunelab token`{', or TUNELAB_TOKEN' if origin == 'env' else ''})", flush=True)
    # A request's head and body must arrive within bounds (slow_clients.py); uvicorn has none of its own.
    config = uvicorn.Config(app, log_config=None, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=5, lifespan="on", http=HeadDeadlineProtocol)
    GracefulServer(config, app.state.orchestrator, shutdown_grace_s()).run(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tunelab.server", description="Serve the tunelab API and web page.")
    parser.add_argument("--host", default=DEFAULT_HOST, help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port; 0 picks a free one and prints it")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--allow-remote-code", action="store_true",
                        help="let API callers set trust_remote_code with approved_remote_code_fingerprint "
                             "(runs that code from model repositories, and only that)")
    parser.add_argument("--allow-unpinned-remote-code", action="store_true",
                        help="also without approved_remote_code_fingerprint (runs whatever code the model holds at load time)")
    parser.add_argument("--allow-output-anywhere", action="store_true",
                        help="let API callers set allow_output_outside_root (write outside the outputs root)")
    parser.add_argument("--allow-ray", action="store_true",
                        help="let API callers set ray_address (sends the run's config, secrets included, to that Ray cluster)")
    parser.add_argument("--allow-multi-node", action="store_true",
                        help="let API callers set nodes (opens torchrun's unauthenticated rendezvous port to the network)")
    parser.add_argument("--allow-reward-code", action="store_true",
                        help="let API callers name a python reward file inside the data roots (objective grpo; runs that code)")
    parser.add_argument("--allow-image-urls", action="store_true",
                        help="let runs download images their data names by http(s) URL (the server then fetches "
                             "addresses its clients choose)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="also answer to this Host name (repeatable; '*' answers to any)")
    parser.add_argument("--max-queued-per-key", type=int, default=None, metavar="N",
                        help="how many queued runs one key may have waiting (default: TUNELAB_MAX_QUEUED_PER_KEY, else 20)")
    args = parser.parse_args(argv)
    serve(args.host, args.port, log_level=args.log_level, allow_remote_code=args.allow_remote_code,
          allow_unpinned_remote_code=args.allow_unpinned_remote_code,
          allow_output_anywhere=args.allow_output_anywhere, allow_ray=args.allow_ray,
          allow_multi_node=args.allow_multi_node, allow_reward_code=args.allow_reward_code,
          allow_image_urls=args.allow_image_urls, allowed_hosts=args.allowed_host,
          max_queued_per_key=args.max_queued_per_key)
