"""What `tunelab demo` trains and what it prints after: the built-in tiny model and sample
data of each modality and method, checked option by option, and each demo's own figures
(reward margins, nDCG@10, word error rate) once the run is over. Each family's demo is
built by the tunelab.demos module its spec names (`demo_builder`), imported only when that
demo runs. Torch-free: the training happens in the run's worker like any other run.
"""

from __future__ import annotations

import importlib
from typing import Any

from tunelab import families
from tunelab.config.run_config import ConfigError, RunConfig

# The demos are the family specs' (`demo`): one per modality, and for tts one per family.
MODALITIES = tuple(dict.fromkeys(spec.modality for spec in families.all() if spec.demo))
METHODS = ("sft", "dpo", "orpo", "simpo", "kto", "grpo")
TTS_FAMILIES = tuple(spec.demo for spec in families.all() if spec.demo and spec.modality == "tts")
TEXT_DEMO_STEPS = 60


def _either(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}"


def demo_spec(modality: str, tts_family: str) -> families.FamilySpec:
    """The family whose demo --modality names (and --tts-family, where a modality has several)."""
    named = [spec for spec in families.all() if spec.demo and spec.modality == modality]
    return named[0] if len(named) == 1 else next(spec for spec in named if spec.demo == tts_family)


def demo_run_config(backend: str, steps: int | None, modality: str, method: str, tts_family: str, console: Any) -> RunConfig:
    """The demo run's config, its assets built (once, then cached); ConfigError naming the option at fault."""
    if modality not in MODALITIES:
        raise ConfigError.single("--modality", f"'{modality}' is not a demo; use {_either(MODALITIES)}")
    if method not in METHODS:
        raise ConfigError.single("--method", f"'{method}' is not a demo method; use sft, dpo, orpo, simpo, kto or grpo")
    if tts_family not in TTS_FAMILIES or (tts_family != "orpheus" and modality != "tts"):
        raise ConfigError.single("--tts-family", f"'{tts_family}' is not a tts demo model; use {_either(TTS_FAMILIES)}, with --modality tts")
    if method != "sft" and (modality != families.DEFAULT.modality or backend != "torch"):
        raise ConfigError.single("--method", f"the {method} demo trains the text model with backend torch; drop --modality and --backend")
    spec = demo_spec(modality, tts_family)
    builder = importlib.import_module(spec.demo_builder)
    if steps is None:
        steps = getattr(builder, "DEMO_STEPS", TEXT_DEMO_STEPS)
    console.print("preparing the demo model and data (built once, then cached)…")
    if not spec.trains_with(backend):
        raise ConfigError.single("--backend", f"the {modality} demo trains with backend torch; drop --backend")
    return builder.demo_run_config(steps, backend, method)


def demo_rewards(method: str, store: Any, run_id: int) -> list[Any]:
    """A preference or GRPO demo's reward lines for the summary; none for sft."""
    if method == "grpo":
        from tunelab.demos.grpo import reward_summary as grpo_summary

        return grpo_summary(store.get_metric_extras(run_id))
    if method != "sft":
        from tunelab.demos.preference import reward_summary

        return reward_summary(store.get_metric_extras(run_id))
    return []


def print_demo_evals(outcome: Any, modality: str, tts_family: str, console: Any) -> None:
    """The demo's own figures, first eval against last (the embedding demo's nDCG@10, the speech demo's WER)."""
    builder = importlib.import_module(demo_spec(modality, tts_family).demo_builder)
    if hasattr(builder, "print_demo_evals"):
        builder.print_demo_evals(outcome, console)
