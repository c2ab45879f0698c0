"""What `tunelab export` refuses, and that a refusal writes nothing: runs that are not
finished, options that do not fit the run (exit 2 naming the option), destinations
outside the outputs root, and a failing or killed export process (exit 1 with its reason)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from export_helpers import TUNELAB, run_cli
from tunelab.store import Store

CONFIG = {"model_name": "/models/tiny", "training_type": "lora", "backend": "torch"}


def recorded_run(home: Path, status: str, *, folder: Path | None = None, config: dict | None = None,
                 cancelled: bool = False, error: str | None = None) -> int:
    """A run row as the orchestrator leaves it, written through the store."""
    store = Store(home / "tunelab.db")
    config = config or CONFIG
    run_id = store.create_run(config, config["model_name"], "data.jsonl")
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        store.set_output_dir(run_id, str(folder))
    if cancelled:
        store.mark_cancel_requested(run_id)
    if status != "running":
        store.finalize_run(run_id, status=status, ended_at=time.time(), final_step=3, output_dir=str(folder) if folder else None,
                           error_message=error, resume_blocked=False)
    store.close()
    return run_id


def refused(result, code: int, *words: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output
    flat = " ".join(result.stderr.split())
    for word in words:
        assert word in flat, flat


def test_running_run_is_refused(home):
    folder = home / "outputs" / "busy"
    run_id = recorded_run(home, "running", folder=folder)
    refused(run_cli(["export", run_id], home), 1, "still running")
    assert list(folder.iterdir()) == []


def test_error_run_without_checkpoint_is_refused(home):
    folder = home / "outputs" / "failed"
    run_id = recorded_run(home, "error", folder=folder, error="CUDA out of memory")
    refused(run_cli(["export", run_id, "--format", "merged"], home), 1, "ended in error", "CUDA out of memory", f"tunelab resume {run_id}")
    assert list(folder.iterdir()) == []


def test_cancelled_and_unknown_runs_are_refused(home):
    cancelled = recorded_run(home, "stopped", cancelled=True)
    refused(run_cli(["export", cancelled], home), 1, "cancelled")
    refused(run_cli(["export", 4242], home), 1, "no run 4242")


def test_stopped_run_without_a_valid_checkpoint_is_refused(home):
    folder = home / "outputs" / "stopped"
    (folder / "tmp-checkpoint-3").mkdir(parents=True)  # a save that never finished
    run_id = recorded_run(home, "stopped", folder=folder)
    refused(run_cli(["export", run_id], home), 1, "no valid checkpoint")


@pytest.mark.parametrize(("args", "option"), [
    (["--format", "onnx"], "--format"),
    (["--format", "merged", "--dtype", "int8"], "--dtype"),
    (["--format", "adapter", "--dtype", "float16"], "--dtype"),
    (["--format", "merged", "--quant", "q4_k_m"], "--quant"),
    (["--format", "gguf", "--quant", "q3_k_s"], "--quant"),
    (["--format", "gguf-adapter", "--dtype", "float16"], "--dtype"),
])
def test_bad_options_exit_2_naming_the_option(home, args, option):
    refused(run_cli(["export", 1, *args], home), 2, option)


@pytest.mark.slow
def test_adapter_export_of_a_full_run_is_refused(full_run):
    refused(run_cli(["export", full_run.run_id, "--format", "adapter"], full_run.home), 2, "--format", "training_type=full")
    refused(run_cli(["export", full_run.run_id, "--format", "gguf-adapter"], full_run.home), 2, "--format", "no LoRA adapter")
    assert not (full_run.output_dir / "export-adapter").exists()


@pytest.mark.slow
def test_destinations_outside_the_outputs_root_are_refused(lora_run, tmp_path):
    outside = tmp_path / "outside"
    link = lora_run.outputs_root / "link-out"
    link.symlink_to(tmp_path, target_is_directory=True)
    try:
        for dest in (outside, "../../escape", link / "sub", lora_run.outputs_root):
            refused(run_cli(["export", lora_run.run_id, "--dest", dest], lora_run.home), 2, "--dest", "outputs root")
    finally:
        link.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert not (lora_run.home.parent / "escape").exists()


@pytest.mark.slow
def test_a_folder_holding_other_files_is_not_overwritten(lora_run):
    folder = lora_run.outputs_root / "my-notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    refused(run_cli(["export", lora_run.run_id, "--dest", folder], lora_run.home), 2, "--dest", "already holds other files")
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    # A file where the destination's parent folder would go.
    refused(run_cli(["export", lora_run.run_id, "--dest", folder / "notes.txt" / "adapter"], lora_run.home), 2, "--dest", "cannot create")
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


@pytest.mark.slow
def test_gguf_of_an_architecture_llama_cpp_lacks_is_refused(home, demo_assets):
    from transformers import OPTConfig, OPTForCausalLM

    folder = home / "outputs" / "opt-run"
    OPTForCausalLM(OPTConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, ffn_dim=64, vocab_size=600,
                             word_embed_proj_dim=32, max_position_embeddings=64)).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(demo_assets.model_dir / name, folder / name)
    run_id = recorded_run(home, "completed", folder=folder, config={**CONFIG, "model_name": str(folder), "training_type": "full"})
    refused(run_cli(["export", run_id, "--format", "gguf"], home), 2, "--format", "does not support the OPTForCausalLM",
            "export format merged")
    assert sorted(p.name for p in folder.iterdir() if "export" in p.name) == []


def test_gguf_of_a_csm_speech_to_text_or_audio_chat_model_is_refused_when_planned(home):
    """Refused by plan_export (what the CLI and the server call) before any child runs, from
    the model's config.json: the run's own (a full run) or its base model's (a LoRA run)."""
    import json

    from tunelab.export.plan import ExportInputError, plan_export

    whisper = {"model_type": "whisper", "is_encoder_decoder": True}
    audio_chat = {"model_type": "qwen2_audio", "audio_config": {"model_type": "qwen2_audio_encoder"}, "text_config": {"model_type": "qwen2"}}

    def run_of(name: str, model_config: dict, weights: str) -> dict:
        folder = home / "outputs" / name
        folder.mkdir(parents=True)
        (folder / weights).write_bytes(b"")
        model = folder if weights == "model.safetensors" else home / "models" / name
        model.mkdir(parents=True, exist_ok=True)
        (model / "config.json").write_text(json.dumps(model_config))
        config = {**CONFIG, "model_name": str(model), "training_type": "full" if weights == "model.safetensors" else "lora"}
        return {"id": 7, "status": "completed", "output_dir": str(folder), "config": config, "model_name": str(model)}

    cases = [("csm", {"model_type": "csm"}, "model.safetensors", "a Sesame CSM text-to-speech model"),
             ("whisper", whisper, "adapter_model.safetensors", "a speech-to-text model (whisper)"),
             ("qwen2-audio", audio_chat, "model.safetensors", "an audio chat model (qwen2_audio)")]
    for name, model_config, weights, what in cases:
        run = run_of(name, model_config, weights)
        for fmt in ("gguf", "gguf-adapter") if weights != "model.safetensors" else ("gguf",):
            with pytest.raises(ExportInputError) as caught:
                plan_export(run, 7, fmt, None, None)
            message = str(caught.value)
            assert caught.value.field == "format" and f"run 7 trained {what}" in message and f"format {fmt} does not apply" in message
            assert "export format merged (the full model as safetensors)" in message
            assert ("or adapter (the LoRA adapter as safetensors)" in message) == (weights != "model.safetensors")
        assert plan_export(run, 7, "merged", None, None).format == "merged"  # what the refusal offers plans
    # An Orpheus-style text-to-speech model is a Llama: its GGUF export plans.
    orpheus = run_of("orpheus", {"model_type": "llama", "tunelab_tts": {"codebook_size": 4096}}, "model.safetensors")
    assert plan_export(orpheus, 7, "gguf", None, None).format == "gguf"


@pytest.mark.slow
def test_a_failing_export_process_exits_1_with_its_reason(home, lora_run):
    """The adapter is intact but the base model it needs has gone: the merge fails."""
    folder = home / "outputs" / "orphan-adapter"
    shutil.copytree(lora_run.output_dir, folder, ignore=shutil.ignore_patterns("checkpoint-*", "export-*"))
    missing_base = home / "deleted-base-model"
    run_id = recorded_run(home, "completed", folder=folder, config={**CONFIG, "model_name": str(missing_base)})
    refused(run_cli(["export", run_id, "--format", "merged"], home), 1, f"exporting run {run_id} as merged failed", "deleted-base-model")
    assert sorted(p.name for p in folder.iterdir() if "export" in p.name) == []


@pytest.mark.slow
def test_a_killed_export_process_leaves_no_partial_export(lora_run):
    import psutil

    dest = lora_run.outputs_root / "killed-merge"
    env = {**os.environ, "TUNELAB_HOME": str(lora_run.home), "COLUMNS": "200"}
    cli = subprocess.Popen([*TUNELAB, "export", str(lora_run.run_id), "--format", "merged", "--dest", str(dest)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and cli.poll() is None:
        found = [p for p in psutil.Process(cli.pid).children() if "tunelab.export.child" in " ".join(p.cmdline())]
        if found:
            child = found[0]
            break
        time.sleep(0.05)
    assert child is not None, "the export never started its child process"
    child.kill()
    stdout, stderr = cli.communicate(timeout=60)
    refused(subprocess.CompletedProcess(cli.args, cli.returncode, stdout, stderr), 1, "killed by signal 9")
    assert not dest.exists()
    assert not [p for p in dest.parent.iterdir() if "partial" in p.name]
