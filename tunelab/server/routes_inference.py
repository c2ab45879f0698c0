"""OpenAI-compatible serving of trained runs (`/v1/...`) and the inference status (`/api/inference`).

`GET /v1/models` lists one id per run that can answer (`run-12`) and its base (`run-12-base`);
`run-12-checkpoint-40` names a checkpoint. `POST /v1/chat/completions` renders the
messages with the run's chat template (with images for a vision-language run, audio clips
for an audio chat run: `inference.media_input`); `POST /v1/completions` continues a plain prompt.
Both stream (`stream: true`: Server-Sent Events in OpenAI's chunk format, ending with
`data: [DONE]`) or answer at once. The model runs in the inference child
(`tunelab.inference`), never in this process; a client that goes away stops its answer.
The bearer token guards these routes like every other (OpenAI clients send their API key
as `Authorization: Bearer <key>`: pass the tunelab token as the key).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import PurePath
from typing import Any, AsyncIterator

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tunelab import families
from tunelab.inference.client import Generation, GenerationRefused, InferenceFailed
from tunelab.inference.devices import DeviceBusy
from tunelab.inference.host import HostBusy
from tunelab.inference.media_input import media_kinds
from tunelab.inference.target import InferenceError, ModelTarget, model_id, parse_model_id, resolve_target, servable_targets, trained
from tunelab.server.openai_schemas import ChatRequest, CompletionRequest, OpenAIError, parse
from tunelab.server.roles import caller_of
from tunelab.server.run_uses import RunBeingDeleted
from tunelab.server.schemas import error_responses

router = APIRouter(prefix="/v1", tags=["openai"], responses=error_responses(400, 401, 404, 409, 422, 500))
status_router = APIRouter(prefix="/api", tags=["inference"], responses=error_responses(401))
# /v1/models lists the newest runs; a model id names any run, listed or not.
LISTED_RUNS = 500
SHOWN_IN_ERRORS = 20
DISCONNECT_POLL_S = 0.25
BODY_HELP = "OpenAI's request body (see docs/INFERENCE.md); fields that change nothing (user, metadata) are accepted."


def install_openai_errors(app: Any) -> None:
    @app.exception_handler(OpenAIError)
    async def _openai_error(_: Request, exc: OpenAIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)


def _servable(request: Request) -> list[tuple[ModelTarget, dict[str, Any]]]:
    """Each run among the newest that can answer now, with its record."""
    return servable_targets(request.app.state.store.list_runs(limit=LISTED_RUNS))


def _available(request: Request) -> str:
    ids = [m for target, _ in _servable(request) for m in (target.model_id(), target.model_id(base=True))]
    shown = ", ".join(ids[:SHOWN_IN_ERRORS]) + (f" and {len(ids) - SHOWN_IN_ERRORS} more" if len(ids) > SHOWN_IN_ERRORS else "")
    return f"available models: {shown}" if ids else "no run can answer yet: train one to completion first (`tunelab demo`)"


def _target(request: Request, name: str) -> tuple[ModelTarget, bool]:
    """The target a model id names and whether its base was asked for; 404 naming the choices."""
    parsed = parse_model_id(name)
    if parsed is None:
        raise OpenAIError(404, f"the model {name!r} does not exist; {_available(request)}", param="model", code="model_not_found")
    run_id, step, base = parsed
    try:
        target = resolve_target(request.app.state.store.get_run(run_id), run_id, step)
    except InferenceError as exc:
        raise OpenAIError(404, f"the model {name!r} cannot answer: {exc}; {_available(request)}", param="model",
                          code="model_not_found") from None
    return target, base


async def _start(request: Request, target: ModelTarget, base: bool, **ask: Any) -> Generation:
    host = request.app.state.inference
    # The run is in use from its loading to the answer's end: a delete meanwhile is refused.
    try:
        release = request.app.state.run_uses.begin(target.run_id, "chat")
    except RunBeingDeleted as exc:
        raise OpenAIError(409, str(exc), code="run_deleting", kind="conflict_error") from None
    try:
        # Blocking (it may load the model first), so off the event loop.
        generation = await asyncio.to_thread(host.start, target, adapter=not base, loop=asyncio.get_running_loop(), **ask)
    except (DeviceBusy, HostBusy) as exc:
        release()
        raise OpenAIError(409, str(exc), code="device_busy" if isinstance(exc, DeviceBusy) else "model_busy",
                          kind="conflict_error") from None
    except InferenceFailed as exc:
        release()
        raise OpenAIError(500, str(exc), code="inference_failed", kind="server_error") from None
    except BaseException:
        release()
        raise
    generation.on_end(lambda _generation, _message: release())
    return generation


def _failure(exc: Exception) -> OpenAIError:
    if isinstance(exc, GenerationRefused):
        return OpenAIError(400, str(exc), param=exc.field)
    return OpenAIError(500, str(exc), code="inference_failed", kind="server_error")


async def _stop_on_disconnect(request: Request, generation: Generation) -> None:
    while not await request.is_disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)
    generation.stop()


async def _whole_answer(request: Request, generation: Generation) -> str:
    watcher = asyncio.create_task(_stop_on_disconnect(request, generation))
    try:
        return "".join([piece async for piece in generation.aevents()])
    except InferenceError as exc:
        raise _failure(exc) from None
    finally:
        watcher.cancel()


def _usage(generation: Generation) -> dict[str, int]:
    return {"prompt_tokens": generation.prompt_tokens, "completion_tokens": generation.completion_tokens,
            "total_tokens": generation.prompt_tokens + generation.completion_tokens}


def _finish(generation: Generation) -> str:
    # "cancelled" only happens once the client has gone; OpenAI's vocabulary has stop and length.
    return "length" if generation.finish_reason == "length" else "stop"


def _sse(payload: Any) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


async def _stream(generation: Generation, chunk: Any, include_usage: bool) -> AsyncIterator[bytes]:
    """SSE chunks for each piece, the finish, optionally the usage, then [DONE]. Starlette
    cancels this when the client disconnects; the `finally` then stops the answer."""
    try:
        async for piece in generation.aevents():
            yield _sse(chunk(piece, None))
        yield _sse(chunk(None, _finish(generation)))
        if include_usage:
            yield _sse({**chunk(None, None), "choices": [], "usage": _usage(generation)})
    except InferenceError as exc:
        yield _sse(_failure(exc).body())
    finally:
        if generation.finish_reason is None:
            generation.stop()
    yield b"data: [DONE]\n\n"


def _event_stream(body: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/models")
def list_models(request: Request) -> dict[str, Any]:
    """The runs that can answer now: `run-N` (the fine-tune) and `run-N-base` (its base model).
    `root` is where the weights come from: for an admin the folder (or hub id); for other
    roles never a path on this server: the model id, or a local base model's folder name."""
    admin = caller_of(request).role == "admin"
    data = []
    for target, run in _servable(request):
        created = int(run.get("ended_at") or run.get("started_at") or 0)
        for base in (False, True):
            root = target.base_model if base else str(target.weights)
            if not admin:
                root = _shown_base(target.base_model) if base else target.model_id()
            data.append({"id": target.model_id(base), "object": "model", "created": created, "owned_by": "tunelab",
                         "root": root, "parent": None if base else model_id(target.run_id, base=True),
                         "name": run.get("display_name") or target.model_id()})
    return {"object": "list", "data": data}


def _shown_base(base_model: str) -> str:
    """A hub id as it is; a local model folder by its name only (its place on this server stays unsaid)."""
    if base_model.startswith(("/", "~", ".")) or base_model.lower().startswith("file:"):
        return PurePath(base_model.rstrip("/")).name or "local model"
    return base_model


def _check_media(target: ModelTarget, messages: list[dict[str, Any]]) -> None:
    """Images only to a vision-language run, audio clips only to an audio chat run (400 otherwise):
    the family spec whose `media` a part is names the run that takes it."""
    for kind in sorted(media_kinds(messages)):
        reader = next(spec for spec in families.all() if spec.media == kind)
        if target.modality != reader.modality:
            runs = reader.words.removesuffix(" model") + " run"
            raise OpenAIError(400, f"messages: {target.model_id()} trained {trained(target.modality)}, which cannot take {kind} input; "
                                   f"send text only, or choose {runs}", param="messages")


@router.post("/chat/completions", response_model=None)
async def chat_completions(request: Request, body: dict[str, Any] = Body(..., description=BODY_HELP)) -> Any:
    """OpenAI's chat completion: the messages rendered with the run's chat template. A
    vision-language run also reads images (`image_url` parts, base64 data: URIs), an audio
    chat run audio clips (`input_audio` parts)."""
    ask = parse(ChatRequest, body)
    messages = ask.child_messages()
    target, base = _target(request, ask.model)
    _check_media(target, messages)
    generation = await _start(request, target, base, messages=messages, sampling=ask.sampling())
    answer_id, created = f"chatcmpl-{secrets.token_hex(12)}", int(time.time())
    if ask.stream:
        first = [True]

        def chunk(piece: str | None, finish: str | None) -> dict[str, Any]:
            delta: dict[str, Any] = {} if piece is None else {"content": piece}
            if first[0] and piece is not None:
                delta["role"], first[0] = "assistant", False
            return {"id": answer_id, "object": "chat.completion.chunk", "created": created, "model": ask.model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        include_usage = bool(ask.stream_options and ask.stream_options.include_usage)
        return _event_stream(_stream(generation, chunk, include_usage))
    text = await _whole_answer(request, generation)
    return {"id": answer_id, "object": "chat.completion", "created": created, "model": ask.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": _finish(generation)}],
            "usage": _usage(generation)}


@router.post("/completions", response_model=None)
async def completions(request: Request, body: dict[str, Any] = Body(..., description=BODY_HELP)) -> Any:
    """OpenAI's (legacy) text completion: the prompt continued as it is, without a chat template."""
    ask = parse(CompletionRequest, body)
    target, base = _target(request, ask.model)
    generation = await _start(request, target, base, prompt=ask.text(), sampling=ask.sampling())
    answer_id, created = f"cmpl-{secrets.token_hex(12)}", int(time.time())

    def chunk(piece: str | None, finish: str | None) -> dict[str, Any]:
        return {"id": answer_id, "object": "text_completion", "created": created, "model": ask.model,
                "choices": [{"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}]}

    if ask.stream:
        return _event_stream(_stream(generation, chunk, bool(ask.stream_options and ask.stream_options.include_usage)))
    text = await _whole_answer(request, generation)
    return {**chunk(text, _finish(generation)), "usage": _usage(generation)}


@status_router.get("/inference")
def inference_status(request: Request) -> dict[str, Any]:
    """The loaded model (if any), its device, answers in progress, and how the last ones ended."""
    return request.app.state.inference.status()
