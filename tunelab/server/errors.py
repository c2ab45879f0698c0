"""One error shape for every failed request, and the handlers that produce it.

Every 4xx/5xx body is `{"error": {"code", "message", "field"?, "fields"?}}`: `code` is a
stable machine word, `message` says what went wrong and how to fix it, `field` names the
input at fault, and `fields` lists every bad field of a 422 so a form can mark them all.
Unexpected exceptions are logged with their stack here, on the server; the client only
ever gets a short message.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tunelab.config.errors import ConfigError, FieldError, errors_from_validation
from tunelab.orchestrator import NoActiveRun, NotResumable, OrchestratorError, PersistError, RunActive, RunMismatch
from tunelab.orchestrator.ownership import DeviceBusy
from tunelab.paths import PathNotAllowed
from tunelab.store import AlreadyResumed, InvalidValue, RunIsRunning, RunNotFound, StoreBusy

log = logging.getLogger("tunelab.server")

# Codes for the statuses Starlette raises by itself (unknown route, wrong method, ...).
HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    503: "unavailable",
}
# Where pydantic says an error sits; the client knows its own field names without them.
REQUEST_PARTS = ("body", "query", "path", "header", "cookie")
ORCHESTRATOR_CODES = {
    RunActive: "run_active",
    DeviceBusy: "device_busy",
    NoActiveRun: "no_active_run",
    RunMismatch: "run_mismatch",
    NotResumable: "not_resumable",
    PersistError: "persist_failed",
}


class ApiError(Exception):
    """An expected failure a route reports to the client as-is."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        super().__init__(message)


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    fields: list[FieldError] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if field:
        body["field"] = field
    if fields:
        body["fields"] = [{"field": f.field, "message": f.message} for f in fields]
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def field_errors_response(errors: list[FieldError]) -> JSONResponse:
    """422 for input that failed validation: the first field up front, all of them listed."""
    first = errors[0] if errors else FieldError(field="body", message="invalid request")
    message = "; ".join(f"{e.field}: {e.message}" for e in errors) or first.message
    return error_response(422, "invalid_input", message, field=first.field, fields=errors or [first])


def _strip_request_part(errors: list[FieldError]) -> list[FieldError]:
    """`body.learning_rate` -> `learning_rate`; a bare `body` (e.g. bad JSON) stays."""
    out = []
    for err in errors:
        head, _, rest = err.field.partition(".")
        name = rest if head in REQUEST_PARTS and rest else err.field
        message = err.message
        if head == "body" and message.startswith("JSON decode error"):
            name, message = "body", "is not valid JSON; send one JSON object"
        out.append(FieldError(field=name, message=message))
    return out


def _allowed_methods(request: Request) -> str:
    """Every method some route takes on this path. Starlette's own 405 names only the
    methods of the first route whose path matched, and a path such as /api/runs/{id}
    has one route per method."""
    path = request.url.path
    methods: set[str] = set()
    for route in request.app.router.routes:
        pattern = getattr(route, "path_regex", None)
        if pattern is not None and getattr(route, "methods", None) and pattern.match(path):
            methods |= route.methods
    return ", ".join(sorted(methods))


def install_error_handlers(app: FastAPI) -> None:
    """Route every failure, expected or not, through the one error shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.field)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        headers = getattr(exc, "headers", None)
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # FastAPI answers a body that is not even text with a bare 400; it is bad JSON like any other.
            not_text = FieldError(field="body", message="is not valid UTF-8 JSON; send one JSON object")
            return field_errors_response([not_text])
        if exc.status_code == 404:
            message = f"nothing at {request.method} {request.url.path}; see /docs for the API"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}; see /docs for the methods it takes"
            headers = {**(headers or {}), "Allow": _allowed_methods(request)}
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, code, message, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        # errors_from_validation reads only `.errors()`, which this exception shares with
        # pydantic's ValidationError, so request bodies get the same messages as config files.
        return field_errors_response(_strip_request_part(errors_from_validation(exc)))

    @app.exception_handler(ConfigError)
    async def _config_error(_: Request, exc: ConfigError) -> JSONResponse:
        return field_errors_response(exc.errors)

    @app.exception_handler(PathNotAllowed)
    async def _path_not_allowed(_: Request, exc: PathNotAllowed) -> JSONResponse:
        # Several refused at once (user_paths.PathsNotAllowed) are all listed; the first leads.
        fields = [FieldError(field=e.field, message=str(e)) for e in getattr(exc, "refusals", [exc])]
        message = str(exc) if len(fields) == 1 else "; ".join(f"{f.field}: {f.message}" for f in fields)
        return error_response(422, "path_not_allowed", message, field=exc.field, fields=fields)

    @app.exception_handler(OrchestratorError)
    async def _orchestrator_error(_: Request, exc: OrchestratorError) -> JSONResponse:
        if isinstance(exc, PersistError):
            log.error("database write failed: %s", exc)
        code = ORCHESTRATOR_CODES.get(type(exc), "run_error")
        return error_response(exc.http_status, code, str(exc))

    @app.exception_handler(RunNotFound)
    async def _run_not_found(_: Request, exc: RunNotFound) -> JSONResponse:
        return error_response(404, "run_not_found", f"{exc}; list runs with GET /api/runs")

    @app.exception_handler(RunIsRunning)
    async def _run_is_running(_: Request, exc: RunIsRunning) -> JSONResponse:
        return error_response(409, "run_active", str(exc))

    @app.exception_handler(AlreadyResumed)
    async def _already_resumed(_: Request, exc: AlreadyResumed) -> JSONResponse:
        return error_response(409, "not_resumable", str(exc))

    @app.exception_handler(InvalidValue)
    async def _invalid_value(_: Request, exc: InvalidValue) -> JSONResponse:
        message = str(exc).removeprefix(f"{exc.field}: ")
        return field_errors_response([FieldError(field=exc.field, message=message)])

    @app.exception_handler(StoreBusy)
    async def _store_busy(_: Request, exc: StoreBusy) -> JSONResponse:
        log.error("run database busy: %s", exc)
        return error_response(503, "database_busy", "the run database is locked by another process; try again in a moment")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "the server hit an unexpected error; details are in the server log")

