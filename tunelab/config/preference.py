"""The training objective (`objective`) and the settings only preference objectives read,
with their checks (called by config/run_config.py).

`training_type` stays the choice of what trains (an adapter, or every weight); `objective`
picks the trainer: `sft` (TRL's SFTTrainer, the default), `dpo` (DPOTrainer), `orpo`
(ORPOTrainer), `simpo` (TRL's CPOTrainer with its SimPO loss; TRL 1.16's DPOTrainer has
no SimPO loss type), `kto` (KTOTrainer) or `grpo` (GRPOTrainer, its own settings in
`config/grpo.py`). The preference objectives train on prompt/chosen/rejected rows; kto
also on prompt/completion/label rows (every shape TRL, UltraFeedback and LLaMA-Factory ship:
`worker/methods/preference_formats.py`, split into turns by `worker/methods/preference_rows.py`); grpo on prompts
(`worker/methods/prompt_formats.py`). Torch-free, like config/run_config.py.
"""

from __future__ import annotations

from typing import Any, Literal

Objective = Literal["sft", "dpo", "orpo", "simpo", "kto", "grpo"]
PREFERENCE_OBJECTIVES = ("dpo", "orpo", "simpo", "kto")
# The data shapes each preference objective reads (worker/methods/preference_formats.py).
OBJECTIVE_FORMATS = {"dpo": ("preference",), "orpo": ("preference",), "simpo": ("preference",),
                     "kto": ("preference", "unpaired_preference"), "grpo": ("prompt_only",)}
# TRL's defaults for each objective's beta; SimPO's paper trains with a far larger one.
# GRPO's is TRL's too: 0, no reference model and no KL term.
DEFAULT_BETA = {"dpo": 0.1, "orpo": 0.1, "simpo": 2.0, "kto": 0.1, "grpo": 0.0}
OBJECTIVE_HELP = ("sft | dpo | orpo | simpo | kto | grpo. What the run optimises: sft trains on instruction, chat or text data; "
                  "dpo (Direct Preference Optimization, the adapter-off base as its reference), orpo (odds-ratio "
                  "preference, no reference) and simpo (SimPO, TRL's CPO trainer with the SimPO loss, no reference) "
                  "train on prompt/chosen/rejected data; kto (Kahneman-Tversky Optimization, with a reference like dpo) "
                  "on prompt/completion/label rows or on prompt/chosen/rejected pairs; grpo (Group Relative Policy Optimization) "
                  "samples num_generations completions per prompt of prompt_only data and learns from their rewards "
                  "(see rewards). Combines with training_type lora, qlora or full.")
BETA_HELP = ("Preference objectives only: how strongly the preference term counts (DPO: how far the model may move "
             "from its reference; ORPO: the odds-ratio weight; SimPO: the reward scale; GRPO: the KL penalty, with the "
             "adapter-off base as reference and kl streamed). Empty: 0.1 for dpo, orpo and kto, 2.0 for simpo, 0 for grpo (no reference, no KL).")


def beta_for(config: Any) -> float:
    """The run config's beta, or its objective's default where it left beta out."""
    return DEFAULT_BETA[config.objective] if config.beta is None else config.beta


def objective_errors(cfg: Any) -> list[tuple[str, str]]:
    """(field, message) for each combination of objective and other settings that cannot train."""
    errs: list[tuple[str, str]] = []
    if cfg.objective == "sft":
        if cfg.beta is not None:
            errs.append(("beta", "beta is a preference setting and objective=sft does not read it; remove beta or set objective=dpo, orpo, simpo, kto or grpo"))
        if cfg.format in ("preference", "unpaired_preference"):
            errs.append(("objective", f"format={cfg.format} trains a preference objective; set objective=dpo, orpo, simpo or kto"))
        if cfg.format == "prompt_only":
            errs.append(("objective", "format=prompt_only trains objective=grpo; set objective=grpo"))
        return errs
    name = f"objective={cfg.objective}"
    learns = "rewarded completions" if cfg.objective == "grpo" else "chosen and rejected answers"
    if cfg.training_type == "continued_pretraining":
        errs.append(("objective", f"{name} learns from {learns}, and continued pretraining reads raw text; "
                                  "use training_type=lora, qlora or full, or objective=sft"))
    if cfg.resolved_backend == "mlx":
        errs.append(("objective", f"{name} is not available with backend=mlx: mlx-lm trains supervised fine-tuning only "
                                  "(no preference or reinforcement trainer); "
                                  "set backend=torch, or objective=sft"))
    fits = OBJECTIVE_FORMATS[cfg.objective]
    if cfg.format not in ("auto", *fits):
        errs.append(("format", f"{name} trains on {' or '.join(fits)} data and format is {cfg.format}; set format=auto or {' or '.join(fits)}"))
    if cfg.objective == "kto" and cfg.batch_size < 2:
        errs.append(("batch_size", "objective=kto compares each completion with the others in its batch (its KL term), so it needs batch_size 2 or more"))
    if cfg.packing:
        errs.append(("packing", f"{name} compares {'the completions of each prompt' if cfg.objective == 'grpo' else 'each chosen answer with its rejected one'}, "
                                "so rows cannot be packed together; set packing=false"))
    if cfg.train_on_completions:
        errs.append(("train_on_completions", f"{name} always scores only the {'completions' if cfg.objective == 'grpo' else 'answers'}, never the prompt; remove train_on_completions"))
    if cfg.embedding_learning_rate is not None:
        errs.append(("embedding_learning_rate", f"{name} trains with one learning rate; remove embedding_learning_rate or use objective=sft"))
    return errs
