"""The `Objective` Protocol: an objective other than sft composed with a training family.

The composition is itself a `TrainingFamily` (`worker/families/protocol.py`), so the torch
backend runs it as it runs a family. What it owns and what it hands on:
  its own        prepare (the objective's rows), build_trainer (TRL's trainer for the
                 objective), save_final (the family's save, less what the objective added)
  the family's   load, targets, wrap, modality: delegated to `family`, member by member
  prefetches_data  false: its rows are not the family's, so the family's prefetch does not apply
`objective` names it (dpo, orpo, simpo, kto, grpo). sft is no composition: the family
trains with its own trainer (`registry.py`). Torch-free.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tunelab.worker.families.protocol import TrainingFamily


@runtime_checkable
class Objective(TrainingFamily, Protocol):
    objective: str
    family: TrainingFamily
