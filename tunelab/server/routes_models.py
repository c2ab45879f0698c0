"""`GET /api/models/local`: the models this server can already train from (the page's Model picker).

The scan itself is `tunelab.server.local_models` (bounded, inside the data roots, Hugging
Face cache entries by hub id only). Typing any other hub id or folder still works: this
list only offers what is already on the machine.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from tunelab.server import local_models
from tunelab.server.schemas import error_responses

router = APIRouter(prefix="/api/models", tags=["models"], responses=error_responses(401))


class LocalModelEntry(BaseModel):
    name: str = Field(description="What to put in model_name: a folder inside the data roots, or a hub id (org/name).")
    kind: str = Field(description="demo | run (a finished full fine-tune or merged export) | folder (in a data root) | hf_cache.")
    label: str = Field(description="Where it comes from, for a person.")


class LocalModelList(BaseModel):
    models: list[LocalModelEntry]
    truncated: bool = Field(description=f"True when more than {local_models.MAX_MODELS} were found and the rest left out.")


@router.get("/local", response_model=LocalModelList)
def list_local_models(request: Request) -> LocalModelList:
    """Models on this machine: the demo, finished runs to continue from, model folders in
    the data roots, and the local Hugging Face cache. Bounded scan; newest runs first."""
    runs = request.app.state.store.list_runs(limit=local_models.MAX_RUNS)
    found, truncated = local_models.local_models(runs)
    return LocalModelList(models=[LocalModelEntry(**m.as_dict()) for m in found], truncated=truncated)
