"""The memory estimator against figures worked out by hand for Llama-2-7B's config, and
the fit decision (refuse, adjust, warn) against device budgets."""

from __future__ import annotations

import pytest

from tunelab.config.run_config import ConfigError, parse_config
from tunelab.memory.fit import Budget, check_fit
from tunelab.memory.plan import (EstimateUnavailable, Settings, estimate, read_model_config, settings_for,
                                 shape_from_config)

LLAMA_7B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
            "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
            "tie_word_embeddings": False}
# By hand: per layer q,k,v,o 4 x 4096^2 + gate,up,down 3 x 4096 x 11008 = 202,375,168;
# x 32 layers, + embeddings and head 2 x 32000 x 4096, + norms 4096 x (2 x 32 + 1).
PARAMS_7B = 202_375_168 * 32 + 2 * 32000 * 4096 + 4096 * 65
LINEAR_7B = 202_375_168 * 32
# LoRA r=16 on all seven: r x (in + out) = 16 x (4 x 8192 + 3 x 15104) = 1,249,280 per layer.
LORA_7B = 1_249_280 * 32
GB = 1e9


@pytest.fixture(scope="module")
def llama():
    return shape_from_config(LLAMA_7B)


def test_weights_by_dtype_match_the_hand_figures(llama):
    assert llama.total_params == PARAMS_7B == 6_738_415_616
    bf16 = estimate(llama, Settings(training_type="lora", precision="bf16"))
    assert bf16.term("weights") == 2 * PARAMS_7B  # 13.48 GB
    assert 13.4 * GB < bf16.term("weights") < 13.55 * GB
    fp32 = estimate(llama, Settings(training_type="lora", precision="fp32", cuda=False))
    assert fp32.term("weights") == 4 * PARAMS_7B
    full = estimate(llama, Settings(training_type="full", precision="bf16"))
    assert full.term("weights") == 4 * PARAMS_7B  # trained weights stay fp32
    assert full.term("gradients") == 4 * PARAMS_7B and full.term("optimizer") == 8 * PARAMS_7B


def test_four_bit_weights_hold_half_a_byte_plus_constants(llama):
    qlora = estimate(llama, Settings(training_type="qlora", load_in_4bit=True))
    # 0.5 byte a weight + an 8-bit constant per 64 + an fp32 constant per 64 x 256.
    assert qlora.term("weights") == int(LINEAR_7B * (0.5 + 1 / 64 + 4 / 16384))
    assert 3.3 * GB < qlora.term("weights") < 3.4 * GB
    # As loaded, with embeddings and head in bf16, that is the familiar ~3.9 GB.
    assert 3.8 * GB < qlora.term("weights") + 2 * 32000 * 4096 * 2 < 3.95 * GB
    # PEFT's k-bit preparation then upcasts the unquantised rest to fp32.
    assert qlora.term("weights_unquantized") == 4 * (PARAMS_7B - LINEAR_7B)


def test_adapter_gradients_and_optimizer_follow_the_trained_parameters(llama):
    lora = estimate(llama, Settings(lora_r=16))
    assert lora.trainable_params == LORA_7B == 39_976_960
    assert lora.term("adapter") == lora.term("gradients") == 4 * LORA_7B
    assert lora.term("optimizer") == 8 * LORA_7B
    dora = estimate(llama, Settings(lora_r=16, use_dora=True))
    assert dora.trainable_params == LORA_7B + 32 * (4 * 4096 + 2 * 11008 + 4096)  # one magnitude per output row
    attention_only = estimate(llama, Settings(lora_r=16, finetune_mlp_modules=False))
    assert attention_only.trainable_params == 16 * 4 * 8192 * 32
    assert estimate(llama, Settings(optim="paged_adamw_8bit")).term("optimizer") == 2 * LORA_7B


def test_activations_and_logits_by_batch_and_sequence(llama):
    plain = estimate(llama, Settings(batch_size=1, max_seq_length=2048, gradient_checkpointing=False))
    # Per token per layer 6h + 2kv + 4i + 7r = 76,912 values, x 32, + 4h outside the layers, in bf16.
    assert plain.term("activations") == 2048 * (32 * 76_912 + 4 * 4096) * 2  # 10.15 GB
    # TRL's fused head: one tile of up to 4,096 tokens x 32,768 vocab, in bf16 plus fp32 statistics.
    assert plain.term("logits") == 2048 * 32000 * (2 + 4)
    checkpointed = estimate(llama, Settings(batch_size=1, max_seq_length=2048, gradient_checkpointing=True))
    assert checkpointed.term("activations") == 2048 * (32 * 4096 + 76_912 + 4 * 4096) * 2  # 0.92 GB
    assert checkpointed.term("activations") < plain.term("activations") / 10
    doubled = estimate(llama, Settings(batch_size=2, max_seq_length=2048, gradient_checkpointing=False))
    assert doubled.term("activations") == 2 * plain.term("activations") and doubled.term("logits") == 2 * plain.term("logits")
    tiled = estimate(llama, Settings(batch_size=8, max_seq_length=2048, gradient_checkpointing=False))
    assert tiled.term("logits") == 4096 * 32000 * (2 + 4)  # 16,384 tokens, one 4,096-token tile at a time


def test_on_a_cpu_the_direct_head_and_the_heap_are_counted(llama):
    on_cpu = dict(cuda=False, precision="fp32", batch_size=1, max_seq_length=2048, gradient_checkpointing=False)
    lora = estimate(llama, Settings(**on_cpu))
    steps = lora.term("activations") + lora.term("logits")
    assert lora.term("activations") == 2048 * (32 * 76_912 + 4 * 4096) * 4
    # tunelab's direct head: 1,048 positions at a time (32M logits / 32,000), 17 bytes a logit.
    assert lora.term("logits") == 1048 * 32000 * 17
    # glibc's heap keeps 3/4 of the step's blocks; the freed adapter gradients are reused first;
    # the gradients themselves are made in memory backward frees, so none count beyond it.
    assert lora.term("heap_retention") == int(0.75 * steps) - 4 * LORA_7B
    assert lora.term("gradients") == 0 and lora.trainable_params == LORA_7B
    accumulated = estimate(llama, Settings(**{**on_cpu, "gradient_accumulation_steps": 2}))
    assert accumulated.term("gradients") == 4 * LORA_7B  # kept between micro-batches: whole
    assert accumulated.term("heap_retention") == int(0.75 * steps)
    # Full fine-tuning of a short batch: the gradients outweigh the step, so the peak is theirs.
    full = estimate(llama, Settings(**{**on_cpu, "training_type": "full", "max_seq_length": 16}))
    assert full.term("heap_retention") == 0
    assert full.term("gradients") + full.term("activations") + full.term("logits") == 4 * PARAMS_7B
    on_gpu = estimate(llama, Settings(training_type="full", max_seq_length=16))
    assert on_gpu.term("heap_retention") == 0 and on_gpu.term("gradients") == 4 * PARAMS_7B


def test_fsdp_shards_what_ddp_replicates(llama):
    single = estimate(llama, Settings(training_type="full"))
    ddp = estimate(llama, Settings(training_type="full", world_size=4, strategy="ddp"))
    fsdp = estimate(llama, Settings(training_type="full", world_size=4, strategy="fsdp"))
    for term in ("weights", "gradients", "optimizer"):
        assert ddp.term(term) == single.term(term)
        assert fsdp.term(term) == single.term(term) // 4
    assert ddp.term("ddp_buckets") == 4 * PARAMS_7B and ddp.total_bytes > single.total_bytes
    assert fsdp.term("fsdp_gather") > 0 and fsdp.total_bytes < single.total_bytes / 2
    assert fsdp.term("activations") == single.term("activations")  # each rank runs its own micro-batch


def test_settings_resolve_auto_as_the_worker_does():
    cfg = parse_config({"model_name": "m", "dataset": "d", "training_type": "full"})
    on_gpus = settings_for(cfg, cuda=True, world_size=2)
    assert (on_gpus.precision, on_gpus.gradient_checkpointing, on_gpus.strategy) == ("bf16", True, "fsdp")
    on_cpu = settings_for(cfg, cuda=False, world_size=1)
    assert (on_cpu.precision, on_cpu.gradient_checkpointing, on_cpu.strategy) == ("fp32", False, "none")


def test_configs_it_cannot_read_are_said_so(tmp_path):
    with pytest.raises(EstimateUnavailable, match="no config.json"):
        read_model_config(str(tmp_path))
    with pytest.raises(EstimateUnavailable, match="hidden size"):
        shape_from_config({"model_type": "mystery"})
    gpt2 = shape_from_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257})
    assert 123_000_000 < gpt2.total_params < 125_000_000  # GPT-2 small: 124M


def _gpu(free_gib: float) -> Budget:
    free = int(free_gib * 2**30)
    return Budget(cuda=True, free_bytes=free, limit_bytes=free, where="GPU 0 (Test GPU)")


def test_a_run_over_the_free_memory_is_refused_with_the_estimate_and_the_fix(llama):
    cfg = parse_config({"model_name": "m", "dataset": "d", "batch_size": 8, "gradient_accumulation_steps": 2,
                        "max_seq_length": 2048})
    s = settings_for(cfg, cuda=True, world_size=1)
    with pytest.raises(ConfigError) as refused:
        check_fit(cfg, llama, s, _gpu(16.5))
    error = refused.value.errors[0]
    assert error.field == "memory_fit"
    total = estimate(llama, s).total_bytes / 2**30
    assert f"an estimated {total:.1f} GiB per GPU" in error.message and "GPU 0 (Test GPU) has 16.5 GiB free" in error.message
    assert "weights 12.6 GiB" in error.message  # the largest terms, named
    assert "set batch_size=2 and gradient_accumulation_steps=8" in error.message and "memory_fit=auto" in error.message


def test_auto_lowers_the_micro_batch_and_keeps_the_effective_batch(llama):
    cfg = parse_config({"model_name": "m", "dataset": "d", "batch_size": 8, "gradient_accumulation_steps": 2,
                        "max_seq_length": 2048, "memory_fit": "auto"})
    fit = check_fit(cfg, llama, settings_for(cfg, cuda=True, world_size=1), _gpu(16.5))
    assert fit.changes == {"batch_size": 2, "gradient_accumulation_steps": 8}
    assert fit.estimate.total_bytes <= 16.5 * 2**30
    assert "effective batch kept at 16" in fit.notes[0]
    # Checkpointing left to auto is switched on first; one set false by the user is left alone.
    cpu_like = parse_config({"model_name": "m", "dataset": "d", "batch_size": 4, "memory_fit": "auto"})
    s = settings_for(cpu_like, cuda=True, world_size=1)
    from dataclasses import replace
    fit = check_fit(cpu_like, llama, replace(s, gradient_checkpointing=False), _gpu(16.5))
    assert fit.changes.get("gradient_checkpointing") is True
    never = parse_config({"model_name": "m", "dataset": "d", "batch_size": 1, "max_seq_length": 65536,
                          "gradient_checkpointing": False, "memory_fit": "auto"})
    with pytest.raises(ConfigError, match="max_seq_length="):
        check_fit(never, llama, settings_for(never, cuda=True, world_size=1), _gpu(16.5))


def test_on_a_cpu_available_ram_only_warns(llama):
    cfg = parse_config({"model_name": "m", "dataset": "d", "batch_size": 1, "max_seq_length": 512})
    s = settings_for(cfg, cuda=False, world_size=1)
    need = estimate(llama, s).total_bytes
    fit = check_fit(cfg, llama, s, Budget(cuda=False, free_bytes=need // 2, limit_bytes=need * 2, where="this machine's RAM"))
    assert fit.changes == {} and "may swap" in fit.notes[0]
    with pytest.raises(ConfigError, match="holds .* GiB in all"):
        check_fit(cfg, llama, s, Budget(cuda=False, free_bytes=need // 4, limit_bytes=need // 3, where="this machine's RAM"))
