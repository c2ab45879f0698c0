"""Preference data and settings in-process: (prompt, chosen, rejected) rows detected by
`format: auto` as strings, as messages lists and through column_mapping; rendered as TRL's
conversational rows; the unknown-shape error lists the columns, the first row and a
working example; and the impossible objective combinations refused by config/run_config.py naming
the field."""

from __future__ import annotations

import json

import pytest

from typed_config import typed
from tunelab.config.run_config import ConfigError, parse_config
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.methods.registry import for_objective
from tunelab.worker.methods.preference import PreferenceMethod
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.families.text.family import TextFamily
from tunelab.worker.families.vision.family import VisionFamily
from tunelab.worker.data.sources import load_raw


def _raw(path, tmp_path, **config):
    return load_raw(typed({"local_datasets": [str(path)], "format": "auto", **config}), tmp_path / "cache")


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_string_pairs_are_detected_and_become_chat_turns(preference_data, tmp_path):
    raw = _raw(preference_data, tmp_path)
    assert raw.format == "preference"
    tokenizer = type("Tok", (), {"chat_template": "{{ messages }}"})()
    prepared = PreferenceMethod(TextFamily(), "dpo").prepare(typed({"batch_size": 2}), Loaded(None, tokenizer, tokenizer), raw)
    row = prepared.train[0]
    assert prepared.train.column_names == ["prompt", "chosen", "rejected"]
    assert row["prompt"] == [{"role": "user", "content": "Name the colour you were given.\nThe colour is " + row["chosen"][0]["content"].removeprefix("You gave me ")}]
    assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
    assert row["chosen"] != row["rejected"]


def test_messages_pairs_and_mapped_columns_are_detected(preference_messages, tmp_path):
    assert _raw(preference_messages, tmp_path).format == "preference"
    # Without a prompt column, whole conversations in chosen/rejected (TRL's implicit prompt).
    implicit = _write(tmp_path / "implicit.jsonl", [{"chosen": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                                                     "rejected": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "go"}]}] * 3)
    assert _raw(implicit, tmp_path / "i").format == "preference"
    renamed = _write(tmp_path / "renamed.jsonl", [{"question": "q", "good": "a", "bad": "b"}] * 3)
    raw = _raw(renamed, tmp_path / "r", column_mapping={"prompt": "question", "chosen": "good", "rejected": "bad"})
    assert raw.format == "preference"


def test_string_pairs_without_a_prompt_are_refused_naming_the_mapping(tmp_path):
    data = _write(tmp_path / "no_prompt.jsonl", [{"chosen": "a", "rejected": "b", "question": "q"}] * 3)
    with pytest.raises(DataFormatError) as info:
        _raw(data, tmp_path)
    assert info.value.field == "column_mapping" and "['prompt']" in info.value.message


def test_an_unknown_shape_lists_the_columns_the_first_row_and_a_preference_example(tmp_path):
    data = _write(tmp_path / "odd.jsonl", [{"question": "q1", "good": "a", "worse": "b"}] * 3)
    with pytest.raises(DataFormatError) as info:
        _raw(data, tmp_path)
    message = info.value.message
    assert info.value.field == "format"
    assert "['question', 'good', 'worse']" in message and "'question': 'q1'" in message
    assert "(prompt, chosen, rejected) = preference" in message and "{prompt: question, chosen: good_answer" in message


def test_preference_data_under_sft_and_sft_data_under_dpo_name_the_setting(preference_data, demo_assets, tmp_path):
    from tunelab.worker.data.formats import to_messages

    row = {"prompt": "p", "chosen": "a", "rejected": "b"}
    with pytest.raises(DataFormatError) as info:
        to_messages(row, "preference", typed({"objective": "sft"}))
    assert info.value.field == "objective" and "objective=dpo" in info.value.message
    raw = _raw(demo_assets.alpaca, tmp_path)
    with pytest.raises(DataFormatError) as info:
        PreferenceMethod(TextFamily(), "dpo").prepare(typed({"batch_size": 2}), None, raw)
    assert info.value.field == "format" and "alpaca" in info.value.message and "prompt, chosen, rejected" in info.value.message


def test_objectives_compose_with_the_text_family_only():
    text = TextFamily()
    assert for_objective(typed({"objective": "sft"}), text) is text
    method = for_objective(typed({"objective": "orpo"}), text)
    assert method.name == "text" and method.family is text and method.modality(None) == "text"  # the family's own steps
    with pytest.raises(DataFormatError) as info:
        for_objective(typed({"objective": "dpo"}), VisionFamily())
    assert info.value.field == "objective"


BASE = {"model_name": "org/model", "local_datasets": ["data.jsonl"]}


@pytest.mark.parametrize(("overrides", "field", "words"), [
    ({"objective": "dpo", "training_type": "continued_pretraining"}, "objective", "continued pretraining"),
    ({"objective": "dpo", "backend": "mlx"}, "objective", "backend=torch"),
    ({"objective": "orpo", "packing": True}, "packing", "packing=false"),
    ({"objective": "simpo", "train_on_completions": True}, "train_on_completions", "only the answers"),
    ({"objective": "dpo", "format": "alpaca"}, "format", "format=auto or preference"),
    ({"objective": "sft", "format": "preference"}, "objective", "objective=dpo"),
    ({"beta": 0.5}, "beta", "objective=sft does not read it"),
    ({"objective": "dpo", "beta": 0}, "beta", "must be more than 0"),
    ({"objective": "ppo"}, "objective", "grpo"),
    ({"objective": "kto", "batch_size": 1}, "batch_size", "batch_size 2 or more"),
    ({"objective": "dpo", "format": "unpaired_preference"}, "format", "format=auto or preference"),
    ({"format": "unpaired_preference"}, "objective", "objective=dpo, orpo, simpo or kto"),
])
def test_impossible_objective_settings_are_refused_naming_the_field(overrides, field, words):
    with pytest.raises(ConfigError) as info:
        parse_config({**BASE, **overrides})
    errors = {e.field: e.message for e in info.value.errors}
    assert field in errors and words in errors[field], errors


def test_preference_settings_pass_and_default_to_sft():
    assert parse_config(BASE).objective == "sft"
    config = parse_config({**BASE, "objective": "dpo", "training_type": "qlora", "beta": 0.2})
    assert (config.objective, config.beta, config.load_in_4bit) == ("dpo", 0.2, True)


def test_sharegpt_turns_become_chat_roles_and_unknown_turn_keys_are_refused(tmp_path):
    tokenizer = type("Tok", (), {"chat_template": "{{ messages }}"})()
    loaded = Loaded(None, tokenizer, tokenizer)
    sharegpt = _write(tmp_path / "sharegpt.jsonl", [{"prompt": [{"from": "human", "value": "hi"}],
                                                     "chosen": [{"from": "gpt", "value": "hello"}],
                                                     "rejected": [{"from": "gpt", "value": "go"}]}] * 3)
    prepared = PreferenceMethod(TextFamily(), "dpo").prepare(typed({"batch_size": 2}), loaded, _raw(sharegpt, tmp_path / "s"))
    assert prepared.train[0]["prompt"] == [{"role": "user", "content": "hi"}]
    assert prepared.train[0]["rejected"] == [{"role": "assistant", "content": "go"}]
    odd = _write(tmp_path / "odd_turns.jsonl", [{"prompt": "p", "chosen": [{"speaker": "bot", "text": "a"}],
                                                 "rejected": [{"speaker": "bot", "text": "b"}]}] * 3)
    with pytest.raises(DataFormatError) as info:
        PreferenceMethod(TextFamily(), "dpo").prepare(typed({"batch_size": 2}), loaded, _raw(odd, tmp_path / "o"))
    assert info.value.field == "dataset" and "row 0 of the training data, column 'chosen'" in info.value.message
    assert "'speaker': 'bot'" in info.value.message and '{"role": "assistant", "content"' in info.value.message


def test_the_dataset_preview_shows_the_prompt_with_the_chosen_answer_and_the_rejected_one(preference_messages, demo_assets, tmp_path):
    from tunelab.worker.preview.child import build_preview

    preview = build_preview(typed({"local_datasets": [str(preference_messages)], "format": "auto"}), 2, str(demo_assets.model_dir), tmp_path)
    first = json.loads(preference_messages.read_text().splitlines()[0])
    assert preview["format"] == "preference" and preview["rendered_with"] == "chat_template"
    text = preview["rows"][0]["text"]
    assert f"<|user|>\n{first['prompt'][0]['content']}<|end|>" in text
    assert f"<|assistant|>\n{first['chosen'][0]['content']}<|end|>" in text
    assert text.endswith(f"[rejected]\n{first['rejected'][0]['content']}")
    assert [m["role"] for m in preview["rows"][0]["messages"]] == ["user", "assistant"]


def test_unpaired_rows_are_detected_for_kto_with_their_labels_read(unpaired_data, preference_data, tmp_path):
    raw = _raw(unpaired_data, tmp_path)
    assert raw.format == "unpaired_preference"
    tokenizer = type("Tok", (), {"chat_template": "{{ messages }}"})()
    loaded = Loaded(None, tokenizer, tokenizer)
    prepared = PreferenceMethod(TextFamily(), "kto").prepare(typed({"batch_size": 2}), loaded, raw)
    assert prepared.train.column_names == ["prompt", "completion", "label"]
    assert prepared.train["label"][:2] == [True, False]
    assert prepared.train[0]["completion"][0]["role"] == "assistant"
    # kto reads paired rows too (TRL splits them); dpo does not read unpaired ones.
    assert PreferenceMethod(TextFamily(), "kto").prepare(typed({"batch_size": 2}), loaded, _raw(preference_data, tmp_path / "p")).format == "preference"
    with pytest.raises(DataFormatError) as info:
        PreferenceMethod(TextFamily(), "dpo").prepare(typed({"batch_size": 2}), loaded, raw)
    assert info.value.field == "format" and "unpaired_preference" in info.value.message
    odd = _write(tmp_path / "odd_labels.jsonl", [{"prompt": "p", "completion": "c", "label": "maybe"}] * 3)
    with pytest.raises(DataFormatError) as info:
        PreferenceMethod(TextFamily(), "kto").prepare(typed({"batch_size": 2}), loaded, _raw(odd, tmp_path / "o"))
    assert info.value.field == "column_mapping" and "'maybe'" in info.value.message


def test_the_dataset_preview_shows_an_unpaired_row_with_its_label(unpaired_data, tmp_path):
    from tunelab.worker.preview.child import build_preview

    preview = build_preview(typed({"local_datasets": [str(unpaired_data)], "format": "auto"}), 2, None, tmp_path)
    assert preview["format"] == "unpaired_preference" and preview["rendered_with"] == "plain"
    assert preview["rows"][0]["text"].endswith("[desirable]") and preview["rows"][1]["text"].endswith("[undesirable]")
    assert [m["role"] for m in preview["rows"][0]["messages"]] == ["user", "assistant"]
