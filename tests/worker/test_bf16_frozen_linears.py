"""A bf16 CPU LoRA run holds its frozen linear weights in bf16 from the start
(`model_setup.store_frozen_linears_in_bf16`, through the text family's `wrap`): the step
computes exactly what bf16 autocast over fp32 weights computes, with the fp32 weights gone.

The models are saved and loaded back with `from_pretrained`, as a run loads them (their
weights are then pages of the file's memory map), and compared with the same model wrapped
without the cast: equal loss and equal adapter gradients, bit for bit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from typed_config import typed  # noqa: E402
from tunelab.worker import model_setup  # noqa: E402
from tunelab.worker.families.text.family import TextFamily  # noqa: E402
from tunelab.worker.families.tts.family import TtsFamily  # noqa: E402
from tunelab.worker.model_setup import DeviceSettings, store_frozen_linears_in_bf16  # noqa: E402

BF16_CPU = DeviceSettings(cuda=False, precision="bf16", gradient_checkpointing=False)
LINEARS_PER_LAYER = 7  # q, k, v, o, gate, up, down


@pytest.fixture(scope="module", params=[True, False], ids=["tied head", "own head"])
def saved(request, tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 tie_word_embeddings=request.param)).save_pretrained(folder)
    return folder, request.param


def _load(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


def _train(model, steps: int = 3) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """Each step's loss under bf16 autocast, and the adapter's weights after the last step."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for step in range(steps):
        ids = (torch.arange(40).reshape(2, 20) * (step + 3) + 5) % 96
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return losses, {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}


def test_training_computes_the_same_numbers_with_the_frozen_linears_in_bf16(saved):
    folder, tied = saved
    config = typed({})
    torch.manual_seed(1)
    reference = model_setup.wrap_for_training(_load(folder), config, BF16_CPU)
    torch.manual_seed(1)
    model = TextFamily().wrap(_load(folder), config, BF16_CPU)

    base = model.get_base_model()
    embedding, head = base.get_input_embeddings(), base.get_output_embeddings()
    linears = [m for n, m in base.named_modules() if n.endswith("base_layer")]
    assert len(linears) == 2 * LINEARS_PER_LAYER
    assert all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert embedding.weight.dtype == torch.float32
    assert head.weight.dtype == (torch.float32 if tied else torch.bfloat16)
    assert (head.weight is embedding.weight) == tied  # the tie survives
    assert all(p.dtype == torch.float32 for n, p in base.named_parameters() if "norm" in n or "lora_" in n)

    # The adapter starts from the same draw (B is zero at first, so only later steps see A).
    losses, adapter = _train(model)
    reference_losses, reference_adapter = _train(reference)
    assert [loss.item() for loss in losses] == [loss.item() for loss in reference_losses]
    assert adapter.keys() == reference_adapter.keys() and adapter
    assert all(torch.equal(adapter[name], reference_adapter[name]) for name in adapter)


@pytest.mark.parametrize("settings, device", [
    ({"precision": "bf16"}, BF16_CPU),  # an explicit precision: the model loads as asked
    ({}, DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)),
    ({}, DeviceSettings(cuda=True, precision="bf16", gradient_checkpointing=True)),  # CUDA loads bf16 itself
    ({"training_type": "full"}, BF16_CPU),  # trained weights stay fp32
    ({"use_dora": True}, BF16_CPU),  # its magnitudes come from the base weights' norms
    ({"embedding_learning_rate": 1e-5}, BF16_CPU),  # embeddings and head trained whole
    ({"objective": "grpo", "rewards": [{"name": "exact_match", "weight": 1.0}]}, BF16_CPU),  # generates outside the trainer's autocast
], ids=["explicit bf16", "fp32 cpu", "cuda", "full", "dora", "embeddings trained", "grpo"])
def test_every_other_run_keeps_its_weights_as_loaded(saved, settings, device):
    folder, _ = saved
    model = _load(folder)
    assert store_frozen_linears_in_bf16(typed(settings), device, model) == 0
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_text_to_speech_keeps_fp32_weights_its_samples_are_generated_outside_autocast():
    assert TextFamily.frozen_linears_in_bf16 and not TtsFamily.frozen_linears_in_bf16
