"""Training objectives: which trainer a run's family trains with (see DESIGN.md, worker/methods/).

`for_objective(config, family)` is the family itself for `sft` (each family's own
trainer), or the family composed with a preference method (`preference.py`, and
`grpo.py` for GRPO) that
replaces only how the data is prepared and which TRL trainer runs; loading, wrapping
and saving stay the family's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunelab.worker.run_config import WorkerConfig


def for_objective(config: WorkerConfig, family: Any) -> Any:
    objective = config.objective
    if objective == "sft":
        return family
    if objective == "grpo":
        from tunelab.worker.methods.grpo import GRPOMethod

        return GRPOMethod(family)
    from tunelab.worker.methods.preference import PreferenceMethod

    return PreferenceMethod(family, objective)
