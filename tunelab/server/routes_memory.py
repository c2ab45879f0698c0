"""`/api/memory/estimate`: will this run fit? The page asks it as the form changes.

The body is a run's settings, as `/api/train/start` takes them (data settings may be left
out: memory does not depend on them). The answer is the estimate per device, each term
named (memory/plan.py), with the model's own code files and their fingerprint (what an
approved_remote_code_fingerprint approves), for the devices a start would get now — this machine's GPUs
as `hardware` lists them, or its RAM — and the verdict a start would reach: fits, the
change memory_fit=auto would make, or the refusal with its fix. Pure Python: only the
model's config.json is read (a local folder, or the local hub cache), never the model.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, Field

from tunelab import hardware, layout, paths
from tunelab.config.run_config import ConfigError, parse_config
from tunelab.orchestrator.gpus import choose_gpus
from tunelab.orchestrator.memory_check import budget_for
from tunelab.remote_code.check import code_summary
from tunelab.server.schemas import RemoteCodeInfo, error_responses

router = APIRouter(prefix="/api/memory", tags=["memory"], responses=error_responses(401))
# Stands in for the data settings when none are given: they do not change the estimate.
NO_DATA = "estimate-without-data"


class MemoryTerm(BaseModel):
    name: str = Field(description="weights, weights_unquantized, adapter, gradients, optimizer, activations, logits, ...")
    bytes: int
    gib: float
    note: str = Field(description="How the figure was reached.")


class MemoryDevice(BaseModel):
    where: str = Field(description="The GPU the figure is checked against (the one with least free memory), or this machine's RAM.")
    cuda: bool
    free_bytes: int = Field(description="Free GPU memory, or available RAM per process.")
    verdict: str = Field(description="fits | adjusted (memory_fit=auto would change settings) | warning (CPU: over the available RAM) | refused")
    message: str = Field("", description="The adjustment, warning or refusal as a start would report it.")
    changes: dict[str, Any] = Field(default_factory=dict, description="The settings memory_fit=auto would change.")


class MemoryEstimate(BaseModel):
    total_bytes: int = Field(description="Estimated peak memory of one device (one rank).")
    total_gib: float
    terms: list[MemoryTerm]
    total_params: int
    trainable_params: int
    per_device: dict[str, Any] = Field(description="devices (ranks), strategy (none | ddp | fsdp), cuda.")
    resolved: dict[str, Any] = Field(description="The settings the estimate assumed: precision, gradient_checkpointing, batch_size, gradient_accumulation_steps.")
    notes: list[str]
    device: MemoryDevice | None = Field(None, description="The check against this machine's devices; null when their free memory is unknown.")
    remote_code: RemoteCodeInfo = Field(description="The model's own code files and their fingerprint, read from its folder or the hub cache.")


@router.post("/estimate", response_model=MemoryEstimate, responses=error_responses(422))
def memory_estimate(body: dict[str, Any] = Body(description="A run's settings, as /api/train/start takes them.")) -> MemoryEstimate:
    """Peak memory per device for these settings, term by term, and whether it fits here."""
    from tunelab.memory.fit import check_fit  # with the estimator: on first use, not at the server's start
    from tunelab.memory.plan import EstimateUnavailable, estimate, read_model_config, settings_for, shape_from_config

    data = dict(body)
    if not (data.get("dataset") or data.get("local_datasets") or data.get("s3")):
        data["dataset"] = NO_DATA
    cfg = parse_config(data)
    # Only the model folder is read (its config.json), inside the data roots like any start's.
    name = paths.check_model_source(cfg.model_name)
    try:
        shape = shape_from_config(read_model_config(name))
    except EstimateUnavailable as exc:
        raise ConfigError.single("model_name", f"no memory estimate: {exc}") from None
    chosen = choose_gpus(cfg, hardware.list_gpus())
    planned = layout.plan(cfg.model_dump(), len(chosen))
    budget = budget_for(chosen, planned.processes_per_node)
    settings = settings_for(cfg, cuda=bool(chosen), world_size=planned.world_size)
    device = None
    if budget is not None:
        try:
            fit = check_fit(cfg, shape, settings, budget)
            verdict = "adjusted" if fit.changes else "warning" if fit.notes else "fits"
            message, changes = (fit.notes[0] if fit.notes else ""), fit.changes
        except ConfigError as exc:
            verdict, message, changes = "refused", exc.errors[0].message, {}
        device = MemoryDevice(where=budget.where, cuda=budget.cuda, free_bytes=budget.free_bytes, verdict=verdict,
                              message=message, changes=changes)
    return MemoryEstimate(**estimate(shape, settings).as_dict(), device=device, remote_code=code_summary(name, cfg.trust_remote_code))
