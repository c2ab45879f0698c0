"""What each role may do, route by route, enforced for every API route.

`RULES` names the rule of every route under /api and /v1; `apply_rules` refuses to build
an app with a route that has none (so a new route cannot slip through unruled) and
documents the 403. `enforce`, an app-wide dependency, applies the rule before the route
runs — before its body is even validated, so a refused caller learns nothing more.
A `{run_id}` in the path is read first, with the routes' own parser (run_ids.py): an id
that is not plain digits is a 422 for every caller, so no spelling can skip a check.

- PUBLIC: anyone (the token gate already let the request through).
- READ: every role (admin, member, viewer).
- USE: admin and member: things that start work but touch no one's run — starting a
  run, previewing a dataset, asking a trained model (which loads it onto a device).
- OWN_RUN: admin; a member only for a run it started (the `{run_id}` in the path).
- OWN_ACTIVE: as OWN_RUN, for the server's current run (stop, reset); anyone with USE
  when there is none.

The home's token is an admin (owner `local`, stored as NULL); so is a run that was started
by it or by the CLI owned by no key, and only admins manage it. A member refused for
someone else's run gets a 403 naming the owner.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.routing import BaseRoute, compile_path

from tunelab.server.auth import CALLER_SCOPE_KEY, TOKEN_ROOTS, Caller
from tunelab.server.errors import ApiError
from tunelab.server.openai_schemas import OpenAIError
from tunelab.server.run_ids import RULE, parse_run_id
from tunelab.server.schemas import error_responses

PUBLIC, READ, USE, OWN_RUN, OWN_ACTIVE = "public", "read", "use", "own_run", "own_active"
ALLOWED_ROLES = {PUBLIC: ("admin", "member", "viewer"), READ: ("admin", "member", "viewer"),
                 USE: ("admin", "member"), OWN_RUN: ("admin", "member"), OWN_ACTIVE: ("admin", "member")}
RULES: dict[tuple[str, str], str] = {
    ("GET", "/api/health"): PUBLIC,
    ("GET", "/api/me"): READ,  # who the caller is: the page offers only what its role may do
    ("POST", "/api/train/start"): USE,
    ("POST", "/api/train/check"): READ,  # checks a config; starts nothing
    ("POST", "/api/train/stop"): OWN_ACTIVE,
    ("POST", "/api/train/reset"): OWN_ACTIVE,
    ("GET", "/api/train/status"): READ,
    ("GET", "/api/train/metrics"): READ,
    ("GET", "/api/train/progress"): READ,
    ("GET", "/api/train/plot.png"): READ,
    ("GET", "/api/runs"): READ,
    ("GET", "/api/runs/{run_id}"): READ,
    ("PATCH", "/api/runs/{run_id}"): OWN_RUN,
    ("DELETE", "/api/runs/{run_id}"): OWN_RUN,
    ("POST", "/api/runs/{run_id}/resume"): OWN_RUN,
    ("POST", "/api/runs/{run_id}/export"): OWN_RUN,
    ("POST", "/api/runs/{run_id}/push"): OWN_RUN,  # uploads the run's weights, as exporting writes them
    ("GET", "/api/runs/{run_id}/status"): READ,
    ("GET", "/api/runs/{run_id}/progress"): READ,
    # A ticket opens a stream as its caller, whose role the stream's own rule checks again then.
    ("POST", "/api/stream-tickets"): READ,
    ("POST", "/api/runs/{run_id}/stop"): OWN_RUN,  # stop, cancel, or withdraw from the queue
    ("GET", "/api/queue"): READ,
    ("POST", "/api/runs/{run_id}/queue"): OWN_RUN,  # a waiting run's place and priority
    ("GET", "/api/sweeps"): READ,
    ("POST", "/api/sweeps"): USE,  # starts runs (its trials), as /api/train/start does
    ("POST", "/api/sweeps/{sweep_id}/stop"): USE,  # and the route lets a member stop only a sweep its key started
    ("GET", "/api/runs/{run_id}/chat"): READ,
    ("POST", "/api/runs/{run_id}/eval"): USE,  # loads a model, as chat does; adds results, changes nothing of the run
    ("GET", "/api/runs/{run_id}/evals"): READ,
    ("POST", "/api/runs/{run_id}/speak"): USE,  # loads a model, as eval does; changes nothing of the run
    ("GET", "/api/runs/{run_id}/samples"): READ,
    ("GET", "/api/runs/{run_id}/samples/{name}"): READ,
    ("GET", "/api/runs/{run_id}/samples.zip"): READ,
    ("GET", "/api/runs/{run_id}/exports"): READ,  # names and sizes, as the run's own answers show
    # Exports are the model's weights: like exporting, taking them away is the owner's (or an
    # admin's); a viewer, who only reads, may not.
    ("GET", "/api/runs/{run_id}/exports/download"): OWN_RUN,
    ("GET", "/api/models/local"): READ,
    ("GET", "/api/models/families"): READ,
    ("POST", "/api/memory/estimate"): READ,  # reads a config and the machine; starts nothing
    ("POST", "/api/datasets/preview"): USE,
    ("GET", "/api/datasets"): READ,
    ("POST", "/api/datasets/upload"): USE,  # writes a new file under <home>/datasets, never over one
    ("GET", "/api/inference"): READ,
    ("GET", "/v1/models"): READ,
    ("POST", "/v1/chat/completions"): USE,
    ("POST", "/v1/completions"): USE,
}
# The run an OWN_ACTIVE check looked at, so the stop that follows acts on that run only.
CHECKED_RUN_SCOPE_KEY = "tunelab.checked_run"
# A request that somehow reached a route without passing the gate has no rights at all.
NOBODY = Caller("nobody")


def is_api_path(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in TOKEN_ROOTS)


def _declared_routes(routes: Sequence[BaseRoute], prefix: str = "") -> Iterator[tuple[str, set[str], BaseRoute]]:
    """(path template, methods, route) of every route as declared, included routers' too.

    FastAPI keeps an included router as one entry whose routes it builds again, for the
    app, when a request first reaches them; walking them with iter_route_contexts would
    build them all at start-up (a fifth of the server's start). The declared routes carry
    the same paths and methods."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _declared_routes(included.routes, prefix + getattr(getattr(route, "include_context", None), "prefix", ""))
        elif getattr(route, "path_format", None) and getattr(route, "methods", None):
            yield prefix + route.path_format, set(route.methods), route


def api_routes(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path template) of every route under /api and /v1, from the app's router."""
    found = set()
    for path, methods, _ in _declared_routes(app.routes):
        if is_api_path(path):
            found |= {(method, path) for method in methods if method != "HEAD"}
    return sorted(found)


def apply_rules(app: FastAPI) -> None:
    """Refuse an app with an unruled API route; document the 403 of every ruled one."""
    missing = [f"{method} {path}" for method, path in api_routes(app) if (method, path) not in RULES]
    if missing:
        raise RuntimeError(f"no role rule for {', '.join(missing)}: add each to tunelab/server/roles.py RULES")
    for path, methods, route in _declared_routes(app.routes):
        rules = {RULES.get((m, path)) for m in methods}
        if is_api_path(path) and rules - {None, PUBLIC} and hasattr(route, "responses"):
            route.responses.setdefault(403, error_responses(403)[403])


@functools.lru_cache(maxsize=8)
def _patterns(routes: tuple[tuple[str, str], ...]) -> list[tuple[str, str, Any]]:
    return [(method, template, compile_path(template)[0]) for method, template in routes]


def rule_for(method: str, path: str) -> tuple[str | None, dict[str, str]]:
    """The rule of the route a request's method and path reach, and its path parameters.
    The rules' paths are matched against the request's own path: the same match whatever
    route object the framework hands on, and with the run id in hand."""
    for rule_method, template, pattern in _patterns(tuple(RULES)):
        found = pattern.match(path)
        if found and rule_method == method:
            return RULES[(rule_method, template)], found.groupdict()
    return None, {}


def caller_of(request: Request) -> Caller:
    return request.scope.get(CALLER_SCOPE_KEY, NOBODY)


def enforce(request: Request) -> None:
    """The app-wide dependency: 403 unless the caller's role (and ownership) allows the route."""
    path = request.scope.get("path", "")
    if not is_api_path(path):
        return  # /docs: nothing under the API roots
    method = "GET" if request.method == "HEAD" else request.method
    rule, params = rule_for(method, path)
    path_run_id = _path_run_id(request, method, params)
    if rule == PUBLIC:
        return
    caller = caller_of(request)
    if rule is None or caller.role not in ALLOWED_ROLES[rule]:
        _refuse(request, "role_forbidden", _role_message(caller, rule))
    if caller.role == "admin" or rule in (READ, USE):
        return
    run_id = path_run_id if rule == OWN_RUN else _active_run(request)
    if run_id is None:
        return
    owner = _owner_of(request, run_id)
    if owner is _NO_SUCH_RUN:
        return  # the route answers 404 itself
    if owner != caller.key_name:
        whose = f"the key {owner!r}" if owner else "the server's own token (owner 'local')"
        _refuse(request, "not_owner", f"run {run_id} belongs to {whose}; the member key {caller.shown!r} may "
                                      "stop, rename, delete, resume, export or reorder only its own runs: ask its owner or an admin")


def may_read_run(caller: Caller, run: dict[str, Any]) -> bool:
    """Whether `caller` may read `run` by the rule of `GET /api/runs/{run_id}`: what a run's
    answer shows of other runs (the runs a resumed run continues) follows the same rule,
    so it never shows a run its caller could not ask for itself."""
    rule = RULES[("GET", "/api/runs/{run_id}")]
    if caller.role not in ALLOWED_ROLES[rule]:
        return False
    return rule in (PUBLIC, READ, USE) or caller.role == "admin" or run.get("owner") == caller.key_name


def _role_message(caller: Caller, rule: str | None) -> str:
    if rule is None:
        return "this route has no role rule, so no key may use it"
    if caller is NOBODY:
        return "this request carries no credentials"
    needed = " or ".join(ALLOWED_ROLES[rule])
    return (f"the key {caller.shown!r} has the role {caller.role}, which only reads; this needs {needed} "
            f"(an admin can create one: `tunelab keys create NAME --role member`)")


def _path_run_id(request: Request, method: str, params: dict[str, str]) -> int | None:
    """The run id in the path, read as the route reads it; a 422 for any other spelling.
    The path was percent-decoded before routing: an id that was encoded in the request
    line (`%31`) is refused too, so the id checked is the id the client wrote."""
    if "run_id" not in params:
        return None
    text = params["run_id"]
    raw = request.scope.get("raw_path")
    written = rule_for(method, raw.decode("latin-1"))[1].get("run_id") if raw else text
    try:
        if written != text:
            raise ValueError(f"{RULE}; got {written!r}" if written else f"{RULE}; the path's run id was %-escaped")
        return parse_run_id(text)
    except ValueError as exc:
        raise RequestValidationError([{"type": "value_error", "loc": ("path", "run_id"), "msg": str(exc),
                                       "input": text}]) from None


def _active_run(request: Request) -> int | None:
    """The run an OWN_ACTIVE route acts on, noted for the route so it acts on no other."""
    run_id = request.app.state.orchestrator.snapshot().get("run_id")
    request.scope[CHECKED_RUN_SCOPE_KEY] = run_id
    return run_id


_NO_SUCH_RUN = object()


def _owner_of(request: Request, run_id: int) -> Any:
    run = request.app.state.store.get_run(run_id)
    return _NO_SUCH_RUN if run is None else run.get("owner")


def _refuse(request: Request, code: str, message: str) -> None:
    if request.url.path.startswith("/v1/"):
        raise OpenAIError(403, message, code=code, kind="permission_error")
    raise ApiError(403, code, message)
