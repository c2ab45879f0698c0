"""What `tunelab demo` trains and what it prints after: the built-in tiny model and sample
data of each modality and method, checked option by option, and each demo's own figures
(reward margins, nDCG@10, word error rate) once the run is over. Torch-free: the demo's
assets are built here, the training happens in the run's worker like any other run.
"""

from __future__ import annotations

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


def demo_run_config(backend: str, steps: int | None, modality: str, method: str, tts_family: str, console: Any) -> RunConfig:
    """The demo run's config, its assets built (once, then cached); ConfigError naming the option at fault."""
    from tunelab.demos.text import demo_config, ensure_demo_assets

    if modality not in MODALITIES:
        raise ConfigError.single("--modality", f"'{modality}' is not a demo; use {_either(MODALITIES)}")
    if method not in METHODS:
        raise ConfigError.single("--method", f"'{method}' is not a demo method; use sft, dpo, orpo, simpo, kto or grpo")
    if tts_family not in TTS_FAMILIES or (tts_family != "orpheus" and modality != "tts"):
        raise ConfigError.single("--tts-family", f"'{tts_family}' is not a tts demo model; use {_either(TTS_FAMILIES)}, with --modality tts")
    if method != "sft" and (modality != "text" or backend != "torch"):
        raise ConfigError.single("--method", f"the {method} demo trains the text model with backend torch; drop --modality and --backend")
    if steps is None:
        from tunelab.demos.speech import SPEECH_DEMO_STEPS

        steps = SPEECH_DEMO_STEPS if modality == "speech" else TEXT_DEMO_STEPS
    console.print("preparing the demo model and data (built once, then cached)…")
    if modality != "text" and backend != "torch":
        raise ConfigError.single("--backend", f"the {modality} demo trains with backend torch; drop --backend")
    if modality == "vision":
        from tunelab.demos.vision import ensure_vision_demo_assets, vision_demo_config

        return vision_demo_config(ensure_vision_demo_assets(), steps=steps)
    if modality == "embedding":
        from tunelab.demos.embedding import embedding_demo_config, ensure_embedding_demo_assets

        return embedding_demo_config(ensure_embedding_demo_assets(), steps=steps)
    if modality in ("speech", "tts"):
        return _speech_config(modality, tts_family, steps)
    if method == "grpo":
        from tunelab.demos.grpo import grpo_demo_config

        return grpo_demo_config(ensure_demo_assets(), steps)
    if method != "sft":
        from tunelab.demos.preference import preference_demo_config

        return preference_demo_config(ensure_demo_assets(), method, steps)
    # 5% held out and measured at the end, so `tunelab eval` has an eval split to compare base and fine-tune on.
    held_out = {"eval_steps": steps, "eval_holdout": 0.05} if backend == "torch" else {}
    return demo_config(ensure_demo_assets(), backend=backend, steps=steps, **held_out)


def _speech_config(modality: str, tts_family: str, steps: int) -> RunConfig:
    """The speech-to-text demo, or a text-to-speech one speaking the same espeak-ng clips."""
    from tunelab.demos.speech import MissingSynthesiser, ensure_speech_demo_assets, speech_demo_config

    try:
        assets = ensure_speech_demo_assets()
        if modality == "speech":
            return speech_demo_config(assets, steps=steps)
    except MissingSynthesiser as exc:
        raise ConfigError.single("--modality", str(exc)) from exc
    clips = assets.transcripts
    if tts_family == "csm":
        from tunelab.demos.csm import csm_demo_config, ensure_csm_demo_assets

        return csm_demo_config(ensure_csm_demo_assets(clips), clips, steps=steps)
    from tunelab.demos.tts import ensure_tts_demo_assets, tts_demo_config

    return tts_demo_config(ensure_tts_demo_assets(clips), clips, steps=steps)


def demo_rewards(method: str, store: Any, run_id: int) -> list[Any]:
    """A preference or GRPO demo's reward lines for the summary; none for sft."""
    if method == "grpo":
        from tunelab.demos.grpo import reward_summary as grpo_summary

        return grpo_summary(store.get_metric_extras(run_id))
    if method != "sft":
        from tunelab.demos.preference import reward_summary

        return reward_summary(store.get_metric_extras(run_id))
    return []


def print_demo_evals(outcome: Any, modality: str, console: Any) -> None:
    """The embedding demo's nDCG@10 and the speech demo's WER, first eval against last."""
    from tunelab.demos.embedding import eval_history

    if modality == "embedding":
        evals = eval_history(outcome.run.get("output_dir"))
        if evals:
            console.print(f"nDCG@10:    {evals[0][1]:.3f} (step {evals[0][0]}) -> {evals[-1][1]:.3f} (step {evals[-1][0]}) on held-out pairs")
    if modality == "speech":
        from tunelab.demos.speech import N_SCORED

        evals = eval_history(outcome.run.get("output_dir"), "eval_wer")
        if evals:
            console.print(f"WER:        {evals[0][1]:.3f} (step {evals[0][0]}) -> {evals[-1][1]:.3f} (step {evals[-1][0]}) "
                          f"on {N_SCORED} of the training clips")
