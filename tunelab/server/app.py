"""`create_app`: the FastAPI application, wired to one orchestrator and one store.

Order matters here: orphaned runs from a previous server life are closed before the
orchestrator can start a new one, and the sweeps this server was running when it died
resume before it answers (routes_sweeps.resume_sweeps); the API routes are registered before the web page is
mounted at `/`, and the page's mount never answers under `/api/`, so an unknown API path
is a JSON 404 and a wrong method a JSON 405. The token gate (token or API key) wraps
everything, and the request guard (Host name, body size) wraps the token gate; each API
route then passes its role rule (`roles`).
Nothing imported here (or by the routes) loads torch, transformers, datasets or mlx.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import threading
from contextlib import asynccontextmanager
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, AsyncIterator, Iterable

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.staticfiles import StaticFiles
from starlette.routing import Match, Mount
from starlette.types import Scope

from tunelab import paths
from tunelab.checkpoints import latest_valid_checkpoint
from tunelab.orchestrator import Orchestrator
from tunelab.orchestrator.identity import load_identity, silent_after_s
from tunelab.orchestrator.ownership import owner_is_alive
from tunelab.inference.host import InferenceHost
from tunelab.orchestrator.prewarm import prewarm_wanted
from tunelab.server.preview_spare import PreviewSpare
from tunelab.server import (roles, routes_chat, routes_dataset_files, routes_datasets, routes_downloads, routes_eval,
                            routes_export, routes_inference, routes_me, routes_memory, routes_models, routes_queue,
                            routes_run_live, routes_runs, routes_samples, routes_speak, routes_stream_tickets, routes_sweeps,
                            routes_train)
from tunelab.server.auth import PUBLIC_PATHS, TokenGate, load_or_create_token
from tunelab.server.errors import install_error_handlers
from tunelab.server.guards import RequestGuard
from tunelab.server.queue_cap import configured_cap
from tunelab.server.routes_push import router as push_router
from tunelab.server.run_uses import RunUses
from tunelab.server.schemas import Health, error_schemas
from tunelab.server.stream_tickets import TicketBook
from tunelab.server.warm_on_use import WarmOnUse, idle_seconds, note_use
from tunelab.store import Store

STATIC_DIR = Path(__file__).parent / "static"
# Swagger UI served from the package, so /docs works on an offline machine (no CDN).
DOCS_ASSETS_DIR = Path(__file__).parent / "docs_assets"
HEARTBEAT_ENV = "TUNELAB_SSE_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 10.0
# For tests and benchmarks only: run a scripted fake worker ("module:function") instead of
# the real trainer, so faults (hangs, garbage events) can be caused through a live server.
WORKER_TARGET_ENV = "TUNELAB_WORKER_TARGET"
# Libraries that belong in worker processes only; health?detail=1 reports any that leaked in.
HEAVY_MODULES = ("torch", "transformers", "peft", "trl", "datasets", "accelerate", "bitsandbytes", "mlx", "mlx_lm")
# Dataset previews run in child processes of a few hundred MB each; two at a time is plenty.
PREVIEW_SLOTS = 2
# Path roots answered by routes only: tunelab's API, and the OpenAI-compatible one.
API_ROOTS = ("/api", "/v1")


class PageMount(Mount):
    """The static web page at `/`, which never claims a path under `/api/` or `/v1/`."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path = scope.get("path", "")
        if any(path == root or path.startswith(root + "/") for root in API_ROOTS):
            return Match.NONE, {}
        return super().matches(scope)


def _version() -> str:
    try:
        return metadata.version("tunelab")
    except metadata.PackageNotFoundError:
        return "0.0.0+local"


def _heartbeat_default() -> float:
    try:
        return max(0.05, float(os.environ.get(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)))
    except ValueError:
        return DEFAULT_HEARTBEAT_S


def create_app(
    *,
    home: str | Path | None = None,
    orchestrator: Any | None = None,
    store: Store | None = None,
    token: str | None = None,
    heartbeat_seconds: float | None = None,
    static_dir: Path | None = STATIC_DIR,
    prewarm: bool = False,
    allow_remote_code: bool = False,
    allow_unpinned_remote_code: bool = False,
    allow_output_anywhere: bool = False,
    allow_ray: bool = False,
    allow_multi_node: bool = False,
    allow_reward_code: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    max_queued_per_key: int | None = None,
) -> FastAPI:
    """The app. Without arguments it uses the tunelab home (TUNELAB_HOME) and owns its
    store and orchestrator; pass your own to share them (you then shut them down).
    `home` sets TUNELAB_HOME for this process, and so for the workers it spawns.
    `prewarm` keeps a worker with its imports done for the next run (an owned
    orchestrator only, while clients use the server: warm_on_use.py; TUNELAB_PREWARM=0/1 overrides it). `allow_remote_code` and
    `allow_output_anywhere` let API callers set trust_remote_code (with an approved
    fingerprint; `allow_unpinned_remote_code`: without one too) and
    allow_output_outside_root; `allow_ray`, ray_address; `allow_multi_node`, nodes; `allow_reward_code`, a python reward. `allowed_hosts`: the Host names answered (None: any;
    `serve` passes loopback names for a loopback bind). `max_queued_per_key`: how many
    queued runs one key may have waiting (None: TUNELAB_MAX_QUEUED_PER_KEY, else 20)."""
    if home is not None:
        os.environ["TUNELAB_HOME"] = str(home)
    queue_cap = configured_cap(max_queued_per_key)  # a bad value refuses the start before anything runs
    owns_store = store is None
    store = store if store is not None else Store()
    if owns_store:  # TUNELAB_DATABASE_URL or the home's file; a password in the URL shows as ***
        logging.getLogger("tunelab.server").info("run history: %s", store.location)
    # Started on the first chat request; unloaded from a GPU before a training run starts there.
    inference = InferenceHost(paths.locks_dir(store.path))
    owns_orchestrator = orchestrator is None
    if owns_orchestrator:
        # Rows left `running` by a process that is gone (a previous life of this server, a
        # killed `tunelab train` on this home, a server whose heartbeat went silent) are ours
        # to close, before any new run; a live owner keeps its run, and so does every other
        # live server sharing the history, whatever its host name (identity.py).
        locks = paths.locks_dir(store.path)
        identity = load_identity()
        store.close_orphans(latest_valid_checkpoint, lambda lock: owner_is_alive(locks, lock),
                            host=socket.gethostname(), server_id=identity.id, silent_after_s=silent_after_s())
        # The warm worker starts when a client first reads the lab, not at start (warm_on_use.py).
        orchestrator = Orchestrator(store, prewarm=prewarm_wanted(prewarm), prewarm_later=True,
                                    before_spawn=inference.unload_gpu, identity=identity, **_worker_target_override())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if owns_orchestrator:
            # Sweeps this server was running when it died go on, from the trials they had.
            await asyncio.to_thread(routes_sweeps.resume_sweeps, app.state)
        idle_watch = asyncio.create_task(app.state.warm_on_use.watch())
        yield
        idle_watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await idle_watch
        await app.state.preview_spare.close()
        await asyncio.to_thread(inference.close)
        if owns_orchestrator:
            await asyncio.to_thread(orchestrator.shutdown)
        if owns_store:
            store.close()

    app = FastAPI(
        title="tunelab",
        version=_version(),
        summary="A local fine-tuning lab: start, watch, stop and resume training runs.",
        description="Every route under /api/ except GET /api/health needs `Authorization: Bearer <token>` "
        "(`tunelab token` prints it). Errors are `{\"error\": {\"code\", \"message\", \"field\"?}}`.",
        lifespan=lifespan,
        docs_url=None,
        # Every route passes its role rule (keys: admin, member, viewer) before it runs.
        # Then a request with a key keeps the warm children alive (warm_on_use.py).
        dependencies=[Depends(roles.enforce), Depends(note_use)],
    )
    app.state.orchestrator = orchestrator
    app.state.store = store
    app.state.inference = inference
    app.state.run_uses = RunUses()  # exports, evaluations and answers in progress, which a delete must not break
    app.state.token = token or load_or_create_token()
    app.state.stream_tickets = TicketBook()  # what a browser's EventSource shows instead of the token
    app.state.heartbeat_seconds = heartbeat_seconds if heartbeat_seconds is not None else _heartbeat_default()
    app.state.start_lock = threading.Lock()
    app.state.preview_slots = asyncio.Semaphore(PREVIEW_SLOTS)
    # "Check dataset" answers from a child that has done its imports (preview_spare.py),
    # started once someone lists the data files (the page does as it opens), not at start.
    app.state.preview_spare = PreviewSpare(enabled=prewarm_wanted(prewarm))
    app.state.warm_on_use = WarmOnUse(orchestrator if owns_orchestrator else None, app.state.preview_spare, idle_seconds())
    app.state.allow_remote_code = allow_remote_code
    app.state.allow_unpinned_remote_code = allow_unpinned_remote_code
    app.state.allow_output_anywhere = allow_output_anywhere
    app.state.allow_ray = allow_ray
    app.state.allow_multi_node = allow_multi_node
    app.state.allow_reward_code = allow_reward_code
    app.state.max_queued_per_key = queue_cap

    install_error_handlers(app)
    app.add_api_route("/api/health", _health, methods=["GET"], response_model=Health, tags=["health"],
                      response_model_exclude_none=True)
    app.include_router(routes_train.router)
    app.include_router(routes_runs.router)
    app.include_router(routes_run_live.router)
    app.include_router(routes_stream_tickets.router)
    app.include_router(routes_queue.router)
    app.include_router(routes_sweeps.router)
    app.include_router(routes_samples.router)
    app.include_router(routes_datasets.router)
    app.include_router(routes_dataset_files.router)
    app.include_router(routes_memory.router)
    app.include_router(routes_export.router)
    app.include_router(routes_downloads.router)
    app.include_router(push_router)
    app.include_router(routes_eval.router)
    app.include_router(routes_speak.router)
    app.include_router(routes_models.router)
    app.include_router(routes_me.router)
    app.include_router(routes_chat.router)
    app.include_router(routes_inference.router)
    app.include_router(routes_inference.status_router)
    routes_inference.install_openai_errors(app)
    roles.apply_rules(app)
    _offline_docs(app)
    if static_dir is not None and static_dir.is_dir():
        app.router.routes.append(PageMount("/", app=StaticFiles(directory=static_dir, html=True), name="page"))
    app.add_middleware(TokenGate, token=app.state.token, store=store, tickets=app.state.stream_tickets)
    app.add_middleware(RequestGuard, allowed_hosts=None if allowed_hosts is None else frozenset(allowed_hosts))
    _document_bearer_auth(app)
    return app


def _worker_target_override() -> dict[str, str]:
    target = os.environ.get(WORKER_TARGET_ENV, "").strip()
    if not target:
        return {}
    logging.getLogger("tunelab.server").warning("%s=%s: runs use this worker instead of the trainer",
                                                WORKER_TARGET_ENV, target)
    return {"worker_target": target}


def _health(request: Request, response: Response,
            detail: Annotated[bool, Query(description="Add process facts (needs the token).")] = False) -> Health:
    """Liveness and readiness. Public without `detail`; with `detail=1` (token required)
    it adds the process id, memory and any training library loaded in the server (always
    none). While the server is shutting down (after SIGTERM, saving the active run) it
    answers 503 with status "shutting_down", so a load balancer stops sending work."""
    status = "shutting_down" if getattr(request.app.state.orchestrator, "closed", False) else "ok"
    if status != "ok":
        response.status_code = 503
    if not detail:
        return Health(status=status, version=request.app.version)
    import psutil

    return Health(
        status=status,
        version=request.app.version,
        pid=os.getpid(),
        rss_mb=round(psutil.Process().memory_info().rss / 2**20, 1),
        heavy_modules=[name for name in HEAVY_MODULES if name in sys.modules],
        phase=request.app.state.orchestrator.snapshot().get("phase"),
    )


def _offline_docs(app: FastAPI) -> None:
    """`/docs` with Swagger UI's files served locally instead of from a CDN."""
    from fastapi.openapi.docs import get_swagger_ui_html

    app.mount("/docs-assets", StaticFiles(directory=DOCS_ASSETS_DIR), name="docs-assets")

    def docs() -> Any:
        return get_swagger_ui_html(openapi_url=app.openapi_url, title="tunelab API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon-32x32.png")

    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)


def _document_bearer_auth(app: FastAPI) -> None:
    """Tell OpenAPI clients (and /docs' Authorize button) about the bearer token."""
    build_schema = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build_schema()
        components = schema.setdefault("components", {})
        # The error shape every route refers to (see schemas.error_responses), in FastAPI's sorted order.
        components["schemas"] = dict(sorted({**error_schemas(), **components.get("schemas", {})}.items()))
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for path, operations in schema.get("paths", {}).items():
            if path in PUBLIC_PATHS:
                continue
            for operation in operations.values():
                operation["security"] = [{"bearer": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi
