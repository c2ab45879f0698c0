"""`GET /api/runs/{run_id}/chat`: what the page's Chat and Compare panels talk to for a run.

It answers the model ids to send to `/v1/chat/completions` (the fine-tune, and its base
for Compare), which weights they mean (a stopped run answers from its saved
checkpoint; `?checkpoint=N` picks any valid one, listed in `checkpoints`), and the chat
template the answers are rendered with — the one the run saved with its tokenizer, or
tunelab's fallback when it saved none. Generation itself
stays in the OpenAI routes (`routes_inference`); this route loads nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from tunelab.config.chat_template import FALLBACK_CHAT_TEMPLATE
from tunelab.inference.target import TargetInputError, TargetNotFound, TargetRefused, resolve_target, valid_checkpoint_steps
from tunelab.server.errors import ApiError
from tunelab.server.run_ids import RunId
from tunelab.server.schemas import error_responses

router = APIRouter(prefix="/api/runs", tags=["history"], responses=error_responses(401, 404, 409))
# A template longer than this is shown cut; the model still uses all of it.
TEMPLATE_SHOWN_CHARS = 20_000


class ChatTarget(BaseModel):
    run_id: int
    model: str = Field(description="The model id of the fine-tune for /v1/chat/completions (e.g. run-3).")
    base_model_id: str = Field(description="The model id of its base (e.g. run-3-base), for Compare.")
    base_model: str = Field(description="The run's model_name: what 'base' means.")
    kind: str = Field(description="adapter (the base is the same weights with the adapter off) or full.")
    step: int | None = Field(description="The checkpoint answering (the one asked for, or a stopped run's saved one); null for final weights.")
    checkpoints: list[int] = Field(description="The steps of the run's valid checkpoints, any of which can answer instead (?checkpoint=N).")
    chat_template: str = Field(description="The template the messages are rendered with.")
    template_source: str = Field(description="tokenizer (saved with the run) or fallback (tunelab's, the run saved none).")


def saved_template(folder: Path) -> str | None:
    """The chat template a saved tokenizer carries: `chat_template.jinja`, or the
    `chat_template` entry of tokenizer_config.json (a string, or named templates)."""
    jinja = folder / "chat_template.jinja"
    try:
        if jinja.is_file():
            return jinja.read_text(encoding="utf-8")
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) and template else None


@router.get("/{run_id}/chat", response_model=ChatTarget, responses=error_responses(422))
def chat_target(request: Request, run_id: RunId,
                checkpoint: Annotated[int | None, Query(ge=0, le=2**62, description="A checkpoint's step instead of the final weights.")] = None) -> ChatTarget:
    """The model ids and chat template for chatting with a finished or stopped run, or one of its checkpoints."""
    run = request.app.state.store.get_run(run_id)
    try:
        target = resolve_target(run, run_id, checkpoint)
    except TargetNotFound as exc:
        raise ApiError(404, "run_not_found", str(exc)) from None
    except TargetRefused as exc:
        raise ApiError(409, "not_chattable", str(exc)) from None
    except TargetInputError as exc:
        raise ApiError(422, "invalid_input", str(exc), field=exc.field) from None
    template = saved_template(target.weights)
    return ChatTarget(run_id=run_id, model=target.model_id(), base_model_id=target.model_id(base=True),
                      base_model=target.base_model, kind=target.kind, step=target.step,
                      checkpoints=valid_checkpoint_steps(run.get("output_dir")),
                      chat_template=(template or FALLBACK_CHAT_TEMPLATE)[:TEMPLATE_SHOWN_CHARS],
                      template_source="tokenizer" if template else "fallback")
