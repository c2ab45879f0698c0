"""`tunelab queue list|move|priority|cancel`: see and rearrange the runs waiting for devices.

With a tunelab server running on this home the commands go to it over HTTP (its role
rules apply: the home's token is an admin, a `TUNELAB_TOKEN` key of a member may change
only its own runs). Without one they act on the home's run database directly.

Acting on the database while a server runs is safe as well: a server starts a queued run
by claiming it in one conditional UPDATE (`status = 'queued'` → running), and a cancel
here is the same kind of UPDATE on the same condition, so the database lets exactly one of
them win. A cancel that loses finds the run no longer queued and says so (it has started:
stop it on the server); a move or priority change that loses changed the order of runs
that no longer wait, which does no harm.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import typer

from tunelab.cli.lazy_console import LazyConsole
from tunelab.text import printable

queue_app = typer.Typer(no_args_is_help=True, help="The runs waiting for devices: list, reorder, prioritise, cancel.")
console = LazyConsole()
EXIT_REFUSED = 1


EXIT_BAD_INPUT = 2
# What a queued run is shown with (as GET /api/queue answers it), besides `queued_at`.
QUEUED_FIELDS = ("id", "display_name", "model_name", "owner", "queue_position", "queue_priority", "device_request")


class QueueRefused(Exception):
    """The server or the store would not do it; the message says why and what to do.
    `exit_code`: 2 for bad input (a place outside the run's priority), else 1."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED):
        super().__init__(message)
        self.exit_code = exit_code


def _store():
    from tunelab.store import Store

    return Store()  # the home's SQLite file, or TUNELAB_DATABASE_URL


def _server():
    from tunelab.cli.remote_run import find_server

    return find_server(lambda _line: None)


def _refused(message: str, code: int = EXIT_REFUSED) -> typer.Exit:
    print(f"error: {printable(message)}", file=sys.stderr)
    return typer.Exit(code)


def _answer(response: httpx.Response) -> Any:
    if response.status_code == 200:
        return response.json()
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    message = error.get("message") or f"HTTP {response.status_code}"
    if response.status_code == 401:
        message += " (set TUNELAB_TOKEN to the server's token or your API key)"
    raise QueueRefused(message, EXIT_BAD_INPUT if response.status_code == 422 else EXIT_REFUSED)


class HttpQueue:
    """The queue of the server running on this home."""

    def __init__(self, server: Any):
        import httpx  # only here: every tunelab command imports this module

        headers = {"Authorization": f"Bearer {server.token}"} if server.token else {}
        self.client = httpx.Client(base_url=server.url, headers=headers, timeout=30.0)
        self.where = f"the server at {server.url}"

    def queued(self) -> list[dict[str, Any]]:
        return _answer(self.client.get("/api/queue"))["queued"]

    def change(self, run_id: int, **change: int) -> None:
        _answer(self.client.post(f"/api/runs/{run_id}/queue", json=change))

    def cancel(self, run_id: int) -> None:
        status = _answer(self.client.get(f"/api/runs/{run_id}"))["status"]
        if status != "queued":
            started = f"; it has started: stop it on the page or with POST /api/runs/{run_id}/stop" if status == "running" else ""
            raise QueueRefused(f"run {run_id} is {status}, not queued, so there is nothing to cancel{started}")
        # save: true withdraws a queued run all the same; should the server have started it a
        # moment ago, the run stops and keeps a checkpoint instead of losing its folder.
        answer = _answer(self.client.post(f"/api/runs/{run_id}/stop", json={"save": True}))
        if answer.get("outcome") != "cancelled":
            raise QueueRefused(f"run {run_id} started before the cancel reached it: it stops at its next step and "
                               f"keeps a checkpoint (`tunelab resume {run_id}` continues it)")


class StoreQueue:
    """The home's run database, when no server runs on it."""

    def __init__(self, store: Any):
        self.store = store
        self.where = f"the run database {store.location}"  # a URL's password shown as ***

    def queued(self) -> list[dict[str, Any]]:
        # The fields GET /api/queue gives, so `--json` reads the same with or without a server.
        return [{**{name: run.get(name) for name in QUEUED_FIELDS}, "queued_at": run["started_at"]}
                for run in self.store.queued_runs()]

    def change(self, run_id: int, position: int | None = None, priority: int | None = None) -> None:
        # The store refuses a run that is not queued (RunNotQueued) and a position outside
        # the run's priority band (InvalidValue naming the positions it can take).
        if priority is not None:
            self.store.set_queue_priority(run_id, priority)
        if position is not None:
            self.store.move_queued(run_id, position)

    def cancel(self, run_id: int) -> None:
        if not self.store.cancel_queued(run_id):
            status = self.store.get_run(run_id)["status"]
            started = "; it has started: stop it where it trains (Ctrl-C, or the server's stop)" if status == "running" else ""
            raise QueueRefused(f"run {run_id} is {status}, not queued, so there is nothing to cancel{started}")


def _queue_and_close(work: Callable[[Any], Any]) -> Any:
    import httpx

    server = _server()
    if server is not None:
        queue = HttpQueue(server)
        try:
            return work(queue)
        except httpx.TransportError as exc:
            raise QueueRefused(f"{queue.where} did not answer ({exc}); try again") from None
        finally:
            queue.client.close()
    with _store() as store:
        return work(StoreQueue(store))


def _run(work: Callable[[Any], Any]) -> Any:
    from tunelab.store import InvalidValue, StoreError

    try:
        return _queue_and_close(work)
    except QueueRefused as exc:
        raise _refused(str(exc), exc.exit_code) from None
    except InvalidValue as exc:
        raise _refused(str(exc), EXIT_BAD_INPUT) from None
    except StoreError as exc:
        raise _refused(str(exc)) from None


def queue_table(rows: list[dict[str, Any]]) -> Any:
    """Position, run, owner, priority, requested devices and name of each queued run (a rich Table)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from tunelab.cli.runs_view import when

    table = Table("position", "run", "owner", "priority", "devices", "name", "queued at",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for r in rows:
        name = r.get("display_name") or r.get("model_name") or ""
        table.add_row(*map(Text, (str(r["queue_position"]), str(r["id"]), printable(r.get("owner") or ""),
                                  str(r.get("queue_priority") or 0), device_text(r.get("device_request")),
                                  printable(name, 40), when(r.get("queued_at")))))
    return table


def device_text(request: Any) -> str:
    """What a run asked for: 'gpus 0,1', '2 gpus', or 'any' (one device: a GPU or the CPU)."""
    if isinstance(request, str):
        try:
            request = json.loads(request)
        except ValueError:
            return printable(request, 20)
    if not isinstance(request, dict):
        return "any"
    if request.get("gpu_ids"):
        return "gpus " + ",".join(map(str, request["gpu_ids"]))
    count = request.get("num_gpus")
    return f"{count} gpu{'s' if count != 1 else ''}" if count else "any"


def _print_queue(rows: list[dict[str, Any]], where: str) -> None:
    if not rows:
        console.print(f"no runs are queued ({printable(where)})")
        return
    console.print(queue_table(rows))


@queue_app.command("list")
def list_queue(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """The queued runs in the order they will start: position 1 starts next."""
    rows, where = _run(lambda q: (q.queued(), q.where))
    if as_json:
        print(json.dumps(rows, indent=1, default=str))
        return
    _print_queue(rows, where)


@queue_app.command("move")
def move(run: int = typer.Argument(..., help="A queued run's id (see `tunelab queue list`)."),
         position: int = typer.Argument(..., min=1, help="Its new place: 1 starts next.")) -> None:
    """Move a queued run to POSITION; the runs between shift by one."""
    rows, where = _run(lambda q: (q.change(run, position=position), q.queued(), q.where)[1:])
    _print_queue(rows, where)


@queue_app.command("priority")
def priority(run: int = typer.Argument(..., help="A queued run's id (see `tunelab queue list`)."),
             value: int = typer.Argument(..., metavar="N", min=-1_000_000, max=1_000_000,
                                         help="A whole number (default 0); a higher priority starts before every lower one.")) -> None:
    """Give a queued run a priority: it waits behind higher priorities only."""
    rows, where = _run(lambda q: (q.change(run, priority=value), q.queued(), q.where)[1:])
    _print_queue(rows, where)


@queue_app.command("cancel")
def cancel(run: int = typer.Argument(..., help="A queued run's id (see `tunelab queue list`).")) -> None:
    """Cancel a queued run before it starts: it is recorded as cancelled and never trains."""
    where = _run(lambda q: (q.cancel(run), q.where)[1])
    console.print(f"cancelled run {run} ({printable(where)})")
