"""`tunelab train` and `tunelab resume` handed to a server running on the same home.

A served lab keeps a worker warm (first step in about half a second instead of six)
and owns the device, so when `<home>/server.json` names a live server that answers
`/api/health`, the CLI submits the run over the REST API and follows it in the
terminal: the same progress bar (`ProgressView`), the same Ctrl-C handling as a local
run (first: POST /api/runs/{id}/stop {save: true}; second: {save: false}), and the same
exit codes (0 completed, 130 stopped, 1 error, 2 bad input). The run is the server's:
it appears on the page and in the history like any other.

Following uses the run's own progress stream (a run queued on a busy server waits in
it, and runs started after it do not get in the way); a dropped connection is resumed with
`Last-Event-ID`, and a server that dies mid-run is reported as such (exit 1).
Only httpx and rich are imported here: the CLI stays quick to start.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
from rich.console import Console

from tunelab import paths
from tunelab.config.run_config import ConfigError, FieldError, RunConfig
from tunelab.config.resume import secrets_from_environment
from tunelab.cli.foreground import EXIT_ERROR, RunOutcome, _InterruptHandler
from tunelab.cli.progress_view import ProgressView
from tunelab.server.discovery import read_server_file, server_file

TOKEN_ENV = "TUNELAB_TOKEN"
HEALTH_TIMEOUT_S = 3.0
# A server whose process lives but which has not answered for this long is taken for dead.
UNREACHABLE_LIMIT_S = 15.0
RECONNECT_PAUSE_S = 0.5
# The stream sends a heartbeat every 10 s when idle; a silence well past that is a drop.
STREAM_READ_TIMEOUT_S = 45.0
# After the run's last event the server writes its record; wait this long for it.
RECORD_WAIT_S = 30.0
LOCAL_HINT = "or train in this process with `tunelab train --local`, which reads any file you can"


class RemoteRefused(Exception):
    """The server would not start or resume the run; `exit_code` is the CLI's answer."""

    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Server:
    url: str
    pid: int
    token: str


def find_server(say: Callable[[str], None]) -> Server | None:
    """The server running on this home, or None (train in this process). `say` gets one
    line telling the user which it is and why."""
    info = read_server_file()
    if info is None:
        say("no tunelab server is running on this home: training in this process")
        return None
    pid, url = info["pid"], info["url"].rstrip("/")
    if not _pid_alive(pid):
        say(f"{server_file()} names server pid {pid}, which is not running: training in this process")
        return None
    if not _answers(url):
        say(f"the tunelab server at {url} (pid {pid}) does not answer: training in this process")
        return None
    say(f"handing the run to the server at {url} (pid {pid}); --local trains in this process")
    return Server(url, pid, read_token())


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, and the health check decides
    return True


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/health", timeout=HEALTH_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False


def read_token() -> str:
    """The token the server uses by the same rule: TUNELAB_TOKEN, else the home's file.
    Never created here: a server that made none uses TUNELAB_TOKEN, which we cannot guess."""
    override = os.environ.get(TOKEN_ENV, "").strip()
    if override:
        return override
    try:
        return paths.token_path().read_text().strip()
    except OSError:
        return ""


def start_payload(cfg: RunConfig) -> dict[str, Any]:
    """The API body for `cfg`: the settings the file gave (secrets included, as the API
    takes them), with a local model folder made absolute, since the server's working
    folder is not ours. Data paths are absolute already (`load_config_file`)."""
    full = cfg.worker_payload()
    body = {key: full[key] for key in cfg.model_fields_set}
    model = Path(cfg.model_name).expanduser()
    if cfg.model_name.startswith((".", "~")) or (not model.is_absolute() and model.exists()):
        body["model_name"] = str(model.absolute())
    return body


class RemoteRun:
    """Start or resume one run on `server` and follow it to its end."""

    def __init__(self, server: Server, console: Console):
        self.server, self.console = server, console
        headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
        self.client = httpx.Client(base_url=server.url, headers=headers, timeout=httpx.Timeout(30.0, connect=5.0))
        self._stream_client = httpx.Client(base_url=server.url, headers=headers,
                                           timeout=httpx.Timeout(STREAM_READ_TIMEOUT_S, connect=5.0))
        self.run_id: int | None = None

    def close(self) -> None:
        self.client.close()
        self._stream_client.close()

    # --- submitting ----------------------------------------------------------------------
    def start(self, cfg: RunConfig) -> int:
        # The request id makes a retry after a dropped connection answer the same run.
        body = {**start_payload(cfg), "start_request_id": f"cli-{uuid.uuid4().hex}"}
        response = self._post_retrying("/api/train/start", body)
        if response.status_code in (403, 422):
            raise self._config_error(response)
        return self._job_id(response, "start")

    def resume(self, run: int) -> int:
        # The server may lack the secrets the run used (they are never stored); hand on ours.
        body = secrets_from_environment(os.environ) or None
        return self._job_id(self._post_retrying(f"/api/runs/{run}/resume", body), "resume")

    def _post_retrying(self, path: str, body: dict[str, Any] | None) -> httpx.Response:
        try:
            return self.client.post(path, json=body)
        except httpx.TransportError:
            try:
                return self.client.post(path, json=body)
            except httpx.TransportError as exc:
                raise RemoteRefused(EXIT_ERROR, f"the server at {self.server.url} did not answer ({exc}); "
                                    "try again, or use --local") from None

    def _job_id(self, response: httpx.Response, what: str) -> int:
        if response.status_code == 401:
            raise RemoteRefused(EXIT_ERROR, f"the server at {self.server.url} refused the API token from "
                                f"{TOKEN_ENV} or {paths.token_path()}; set {TOKEN_ENV} to the token it uses, or use --local")
        if response.status_code != 200:
            raise RemoteRefused(EXIT_ERROR, f"the server would not {what} the run: {_message(response)}")
        self.run_id = int(response.json()["job_id"])
        return self.run_id

    def _config_error(self, response: httpx.Response) -> ConfigError:
        """A refused config, field by field as the local path prints it; a path outside
        the server's folders gets the way out."""
        error = _error_body(response)
        fields = error.get("fields") or [{"field": error.get("field") or "config", "message": _message(response)}]
        path_refused = error.get("code") == "path_not_allowed" or response.status_code == 403
        return ConfigError([FieldError(field=f.get("field") or "config",
                                       message=f"{f.get('message')}{'; ' + LOCAL_HINT if path_refused else ''}")
                            for f in fields])

    # --- stopping (called by the Ctrl-C / signal handler) ---------------------------------
    def stop(self, save: bool, expected_run_id: int | None = None) -> None:
        # The run's own route: on a server training several runs, /api/train/stop means the newest.
        response = (self.client.post(f"/api/runs/{expected_run_id}/stop", json={"save": save}) if expected_run_id
                    else self.client.post("/api/train/stop", json={"save": save}))
        if response.status_code != 200:
            raise RuntimeError(_message(response))

    def stop_for_shutdown(self, _grace_s: float) -> int | None:
        """This terminal is going away: the server stops and saves the run as for a first
        Ctrl-C. The deadline is the server's business; the run is its own."""
        self.stop(True, expected_run_id=self.run_id)
        return self.run_id

    # --- following -------------------------------------------------------------------------
    def follow(self, run_id: int) -> RunOutcome:
        """Show the run's progress until it ends; its stored record decides the outcome."""
        inbox: "queue.Queue[dict[str, Any]]" = queue.Queue()
        done = threading.Event()
        reader = threading.Thread(target=self._read_stream, args=(run_id, inbox, done), name="tunelab-follow", daemon=True)
        reader.start()
        last: dict[str, Any] = {}
        try:
            with _InterruptHandler(self, run_id, self.console), ProgressView(self.console) as view:
                while True:
                    try:
                        last = inbox.get(timeout=0.25)
                    except queue.Empty:
                        continue
                    view.show(last)
                    if last.get("type") == "lost" or last.get("final"):
                        break
        finally:
            done.set()
        if last.get("type") == "lost":
            run = {"status": "error", "error_message": last["why"]}
        else:
            run = self._record(run_id) or {"status": last.get("status") or "error", "final_step": last.get("final_step"),
                                           "total_steps": last.get("total_steps"), "error_message": last.get("error"),
                                           "output_dir": last.get("output_dir")}
        return RunOutcome(run_id, run, view.first_loss, view.last_loss, view.steps_seen, last.get("status_message"))

    def _read_stream(self, run_id: int, inbox: "queue.Queue[dict[str, Any]]", done: threading.Event) -> None:
        """Feed `inbox` with the run's events until its final one, or a `lost` event
        saying why following it ended; the terminal never waits on a dead reader."""
        try:
            if self._follow_stream(run_id, inbox, done):
                return
            why = (f"the server (pid {self.server.pid}) went away during run {run_id}; it records the run's end "
                   "when it starts again (`tunelab runs`)")
        except Exception as exc:  # a garbled stream: say what broke instead of hanging
            why = f"reading the server's progress stream failed ({exc!r}); see the run with `tunelab show {run_id}`"
        inbox.put({"type": "lost", "why": why})

    def _follow_stream(self, run_id: int, inbox: "queue.Queue[dict[str, Any]]", done: threading.Event) -> bool:
        """Put the run's events in `inbox`, reconnecting with the last event id held;
        True once its final event is in, False when the server is gone."""
        last_id = f"{run_id}:0"  # the run from its first step
        unreachable_since: float | None = None
        while not done.is_set():
            try:
                with self._stream_client.stream("GET", f"/api/runs/{run_id}/progress",
                                                headers={"Last-Event-ID": last_id}) as response:
                    if response.status_code != 200:
                        raise RuntimeError(f"the progress stream answered HTTP {response.status_code}")
                    unreachable_since = None
                    for kind, data, event_id in _iter_sse(response):
                        if data.get("run_id") not in (None, run_id):
                            # The server follows a newer run, so ours has ended: its record tells how.
                            inbox.put({"type": "complete", "final": True, "run_id": run_id})
                            return True
                        if event_id:
                            last_id = event_id
                        inbox.put({**data, "type": kind})
                        if data.get("final"):
                            return True
            except httpx.TransportError:
                pass
            if not _pid_alive(self.server.pid):
                return False
            unreachable_since = unreachable_since or time.monotonic()
            if not _answers(self.server.url) and time.monotonic() - unreachable_since > UNREACHABLE_LIMIT_S:
                return False
            done.wait(RECONNECT_PAUSE_S)
        return True  # the terminal side stopped following

    def _record(self, run_id: int) -> dict[str, Any] | None:
        """The run's stored row once it is no longer `running` (None if unreachable)."""
        deadline = time.monotonic() + RECORD_WAIT_S
        while True:
            try:
                response = self.client.get(f"/api/runs/{run_id}")
            except httpx.TransportError:
                return None
            if response.status_code != 200:
                return None
            run = response.json()
            if run.get("status") not in ("queued", "running") or time.monotonic() > deadline:
                return run
            time.sleep(0.2)


def submit_and_follow(server: Server, console: Console, submit: Callable[[RemoteRun], int]) -> RunOutcome:
    """Start a run with `submit(remote)` and follow it. ConfigError (exit 2) and
    RemoteRefused come out before anything ran."""
    remote = RemoteRun(server, console)
    try:
        return remote.follow(submit(remote))
    finally:
        remote.close()


def _iter_sse(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """(event, data, id) per Server-Sent Event with JSON data; comments and retry-only
    blocks are skipped, and so are heartbeats, which carry nothing to show."""
    kind, data, event_id = "message", [], None
    for line in response.iter_lines():
        if line == "":
            if data and kind != "heartbeat":
                yield kind, json.loads("\n".join(data)), event_id
            kind, data, event_id = "message", [], None
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                event_id = value


def _error_body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body.get("error") or {} if isinstance(body, dict) else {}


def _message(response: httpx.Response) -> str:
    return _error_body(response).get("message") or f"HTTP {response.status_code}"

