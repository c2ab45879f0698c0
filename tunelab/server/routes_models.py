"""`GET /api/models/local`: the models this server can already train from (the page's Model picker),
and `GET /api/models/families`: what each model family's runs can do (the page's run rules).

The scan itself is `tunelab.server.local_models` (bounded, inside the data roots, Hugging
Face cache entries by hub id only). Typing any other hub id or folder still works: this
list only offers what is already on the machine. The families are the family specs
(`tunelab/families`), torch-free, so the server reads them without importing any worker module.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from tunelab import families
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


_NAMES = [spec.name for spec in families.all()]


class FamilyRules(BaseModel):
    name: str = Field(description=f"The family: {', '.join(_NAMES[:-1])} or {_NAMES[-1]}.")
    modality: str = Field(description="What its runs record as their modality (a run's `modality`).")
    words: str = Field(description="How a message names one of its models, e.g. 'a vision-language model'.")
    backends: list[str] = Field(description="The backends that train it.")
    serves: str = Field(description="chat | speak (answers with audio) | transcribe (evaluated, not chatted with) | embed.")
    media: str | None = Field(description="The chat part it reads besides text: image, audio, or null.")
    evaluates: bool = Field(description="Whether an evaluation measures its runs (text answers or transcripts).")
    gguf: bool = Field(description="Whether its runs export as a GGUF llama.cpp runs.")
    no_chat: str = Field(description="Why its runs have no chat, for the page; empty where they chat.")
    no_eval: str = Field(description="Why its runs have no evaluation, for the page; empty where they have one.")


class FamilyList(BaseModel):
    families: list[FamilyRules]


@router.get("/families", response_model=FamilyList)
def list_families() -> FamilyList:
    """The model families tunelab trains and what a run of each can do (chat, speak, evaluate), in the page's order."""
    return FamilyList(families=[FamilyRules(name=spec.name, modality=spec.modality, words=spec.words, backends=list(spec.backends),
                                            serves=spec.serves, media=spec.media, evaluates=spec.evaluates, gguf=spec.gguf,
                                            no_chat=spec.page_no_chat, no_eval=spec.page_no_eval)
                                for spec in families.all()])
