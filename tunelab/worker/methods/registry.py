"""The training objectives by name: what each makes of a run's family (see DESIGN.md, worker/methods/).

`for_objective(config, family)` looks up the run's objective in OBJECTIVES. sft is the
family itself (each family's own trainer); the others compose the family with a method
(`preference.py`, `grpo.py`, satisfying `protocol.Objective`) that replaces how the data
is prepared, which TRL trainer runs and the final save; loading and wrapping stay the
family's. Adding an objective: its method module, its line here, its settings in config/.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from tunelab.worker.families.protocol import TrainingFamily
from tunelab.worker.methods.grpo import GRPOMethod
from tunelab.worker.methods.preference import PreferenceMethod

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def _family_itself(family: TrainingFamily) -> TrainingFamily:
    return family


OBJECTIVES: dict[str, Callable[[TrainingFamily], TrainingFamily]] = {
    "sft": _family_itself,
    "dpo": partial(PreferenceMethod, objective="dpo"),
    "orpo": partial(PreferenceMethod, objective="orpo"),
    "simpo": partial(PreferenceMethod, objective="simpo"),
    "kto": partial(PreferenceMethod, objective="kto"),
    "grpo": GRPOMethod,
}


def for_objective(config: WorkerConfig, family: TrainingFamily) -> TrainingFamily:
    return OBJECTIVES[config.objective](family)
