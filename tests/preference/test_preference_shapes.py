"""Every preference shape TRL documents, and those LLaMA-Factory and UltraFeedback ship,
detected by `format: auto` and turned into what TRL builds from the same rows: tunelab's
prompt/chosen/rejected (or prompt/completion/label) equal TRL's own `maybe_extract_prompt`
split, and the text TRL renders from tunelab's rows equals what it renders from the
originals (`maybe_apply_chat_template` with the demo model's chat template). LLaMA-Factory
rows, which TRL does not read, are compared with the TRL row LLaMA-Factory's own
conversion means (human -> user, gpt -> assistant; the last message is KTO's completion).
A dict or list where text belongs is refused naming the row and the column. The dataset
preview and the tokens DPO trains on hold each user turn once."""

from __future__ import annotations

import copy

import pytest
from public_shapes import (CONVERSATIONAL_EXPLICIT, CONVERSATIONAL_IMPLICIT, STANDARD_EXPLICIT, STANDARD_IMPLICIT,
                           UNPAIRED_CONVERSATIONAL, UNPAIRED_STANDARD, llamafactory_dpo_row, llamafactory_kto_row,
                           ultrafeedback_row, write_json_array, write_jsonl)
from trl.data_utils import apply_chat_template, maybe_apply_chat_template, maybe_extract_prompt

from typed_config import typed
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.methods.preference import PreferenceMethod
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.families.text.family import TextFamily
from tunelab.worker.data.sources import load_raw


@pytest.fixture(scope="module")
def tokenizer(demo_assets):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_assets.model_dir)


def _prepared(rows, tmp_path, tokenizer, objective="dpo", array=False, **config):
    """The rows as tunelab trains them: written to a file, read with format auto, prepared."""
    path = (write_json_array if array else write_jsonl)(tmp_path / ("data.json" if array else "data.jsonl"), rows)
    raw = load_raw(typed({"local_datasets": [str(path)], "format": "auto", **config}), tmp_path / "cache")
    prepared = PreferenceMethod(TextFamily(), objective).prepare(typed({"batch_size": 1}), Loaded(None, tokenizer, tokenizer), raw)
    return raw.format, [prepared.train[i] for i in range(len(prepared.train))]


def _trl(row, tokenizer):
    """TRL's split and rendering of a row, on a copy (TRL may change what it is given)."""
    split = maybe_extract_prompt(copy.deepcopy(row))
    return split, maybe_apply_chat_template(split, tokenizer)


@pytest.mark.parametrize("row", [CONVERSATIONAL_EXPLICIT, CONVERSATIONAL_IMPLICIT, ultrafeedback_row()],
                         ids=["explicit", "implicit", "ultrafeedback"])
def test_conversational_pairs_split_and_render_as_trl_does(row, tmp_path, tokenizer):
    fmt, [ours] = _prepared([row], tmp_path, tokenizer)
    split, rendered = _trl(row, tokenizer)
    assert fmt == "preference"
    assert ours == {k: split[k] for k in ("prompt", "chosen", "rejected")}
    assert apply_chat_template(ours, tokenizer) == {k: rendered[k] for k in ("prompt", "chosen", "rejected")}


def test_ultrafeedback_trains_on_its_user_turn_once(tmp_path, tokenizer):
    row = ultrafeedback_row()
    _, [ours] = _prepared([row], tmp_path, tokenizer)
    text = "".join(apply_chat_template(ours, tokenizer)[k] for k in ("prompt", "chosen"))
    assert text.count(row["prompt"]) == 1
    assert ours["chosen"] == [{"role": "assistant", "content": "A spider has eight legs."}]


@pytest.mark.parametrize("row", [STANDARD_EXPLICIT, STANDARD_IMPLICIT], ids=["explicit", "implicit"])
def test_standard_pairs_split_as_trl_does_and_render_with_the_chat_template(row, tmp_path, tokenizer):
    fmt, [ours] = _prepared([row], tmp_path, tokenizer)
    split, rendered = _trl(row, tokenizer)
    assert fmt == "preference"
    assert rendered == split  # TRL renders standard rows as they are; tunelab puts them in the chat template
    assert {k: [t["content"] for t in ours[k]] for k in ("prompt", "chosen", "rejected")} == \
           {k: [split[k]] for k in ("prompt", "chosen", "rejected")}
    assert [t["role"] for t in ours["prompt"] + ours["chosen"]] == ["user", "assistant"]
    ours_rendered = apply_chat_template(ours, tokenizer)
    assert ours_rendered["prompt"] == tokenizer.apply_chat_template([{"role": "user", "content": split["prompt"]}],
                                                                    tokenize=False, add_generation_prompt=True)
    assert ours_rendered["chosen"].startswith(split["chosen"])


def test_llamafactory_dpo_rows_as_shipped_render_as_their_trl_row(tmp_path, tokenizer):
    row = llamafactory_dpo_row()
    fmt, [ours] = _prepared([row], tmp_path, tokenizer, array=True)
    meant = {"prompt": [{"role": "user", "content": "What is 2 + 2?"}],
             "chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]}
    split, rendered = _trl(meant, tokenizer)
    assert fmt == "preference" and ours == split
    ours_rendered = apply_chat_template(ours, tokenizer)
    assert ours_rendered == rendered
    assert not any("'from'" in text or "'value'" in text or "{" in text for text in ours_rendered.values())
    # The advice the old refusal gave, mapping the conversation to the prompt, reads the same rows.
    (tmp_path / "mapped").mkdir()
    _, [mapped] = _prepared([row], tmp_path / "mapped", tokenizer, array=True, column_mapping={"prompt": "conversations"})
    assert mapped == ours


@pytest.mark.parametrize("row", [UNPAIRED_STANDARD, UNPAIRED_CONVERSATIONAL], ids=["standard", "conversational"])
def test_unpaired_rows_split_as_trl_does(row, tmp_path, tokenizer):
    fmt, [ours, _] = _prepared([row, {**row, "label": not row["label"]}], tmp_path, tokenizer, objective="kto")
    split, rendered = _trl(row, tokenizer)
    assert fmt == "unpaired_preference" and ours["label"] == row["label"]
    if isinstance(row["prompt"], list):
        assert ours == split and apply_chat_template(ours, tokenizer) == rendered
    else:
        assert (ours["prompt"][0]["content"], ours["completion"][0]["content"]) == (split["prompt"], split["completion"])


def test_llamafactory_kto_rows_as_shipped_render_as_their_trl_row(tmp_path, tokenizer):
    rows = [llamafactory_kto_row(), llamafactory_kto_row(answer="5", label=False)]
    fmt, ours = _prepared(rows, tmp_path, tokenizer, objective="kto", array=True)
    assert fmt == "unpaired_preference" and [r["label"] for r in ours] == [True, False]
    meant = {"prompt": [{"role": "user", "content": "What is 2 + 2?"}],
             "completion": [{"role": "assistant", "content": "5"}], "label": False}
    assert ours[1] == meant
    assert apply_chat_template(ours[1], tokenizer) == maybe_apply_chat_template(copy.deepcopy(meant), tokenizer)


def test_a_chat_dataset_with_a_numeric_label_column_stays_chat_data(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "label": 3}] * 2
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    assert load_raw(typed({"local_datasets": [str(path)], "format": "auto"}), tmp_path / "cache").format == "chatml"


@pytest.mark.parametrize(("row", "column", "words"), [
    ({"prompt": "q", "chosen": [{"role": "assistant", "content": "a"}], "rejected": "b"}, "chosen", "differ in shape"),
    ({"prompt": "q", "chosen": [{"role": "assistant", "content": {"text": "a"}}],
      "rejected": [{"role": "assistant", "content": {"text": "b"}}]}, "chosen", "a dict {'text': 'a'} where text belongs"),
    ({"prompt": "q", "chosen": [{"role": "assistant", "content": [{"type": "text", "text": "a"}]}],
      "rejected": [{"role": "assistant", "content": [{"type": "text", "text": "b"}]}]}, "chosen", "a list"),
    ({"prompt": {"text": "q"}, "chosen": "a", "rejected": "b"}, "prompt", "a turn is {'text': 'q'}"),
    ({"prompt": "q", "completion": {"answer": "a"}, "label": True}, "completion", "a turn is {'answer': 'a'}"),
    ({"messages": [{"role": "user", "content": "q"}], "label": True}, "messages", "ends with the assistant's answer"),
])
def test_a_value_that_is_not_text_is_refused_naming_row_and_column(row, column, words, tmp_path, tokenizer):
    with pytest.raises(DataFormatError) as info:
        _prepared([row, row], tmp_path, tokenizer, objective="kto")
    message = info.value.message
    assert "row 0 of the training data" in message and f"column '{column}'" in message and words in message, message
    assert "expected" in message or "differ" in message


@pytest.mark.parametrize("shape", ["ultrafeedback", "llamafactory_dpo", "llamafactory_kto"])
def test_the_preview_shows_each_user_turn_once_and_no_dict_text(shape, demo_assets, tmp_path):
    from tunelab.worker.preview.child import build_preview

    question = "How many legs does a spider have?"
    if shape == "ultrafeedback":
        path = write_jsonl(tmp_path / "uf.jsonl", [ultrafeedback_row(question)])
    elif shape == "llamafactory_dpo":
        path = write_json_array(tmp_path / "dpo_en_demo.json", [llamafactory_dpo_row(question, "Eight.", "Six.")])
    else:
        path = write_json_array(tmp_path / "kto_en_demo.json", [llamafactory_kto_row(question, "Eight.", True)])
    preview = build_preview(typed({"local_datasets": [str(path)], "format": "auto"}), 1, str(demo_assets.model_dir), tmp_path / "p")
    row = preview["rows"][0]
    assert preview["rendered_with"] == "chat_template"
    assert row["text"].count(question) == 1 and "{'" not in row["text"] and "'value'" not in row["text"], row["text"]
    assert [m["role"] for m in row["messages"]] == ["user", "assistant"]


def test_the_tokens_dpo_trains_on_hold_the_ultrafeedback_question_once(demo_assets, tokenizer, tmp_path):
    import datasets
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig, DPOTrainer

    question = "How many legs does a spider have?"
    _, rows = _prepared([ultrafeedback_row(question), ultrafeedback_row(question, "Eight.", "Ten.", 1)], tmp_path, tokenizer)
    trainer = DPOTrainer(model=AutoModelForCausalLM.from_pretrained(demo_assets.model_dir), processing_class=tokenizer,
                         train_dataset=datasets.Dataset.from_list(rows),
                         args=DPOConfig(output_dir=str(tmp_path / "out"), report_to=[], max_steps=1, use_cpu=True))
    example = trainer.train_dataset[0]
    for answer in ("chosen_ids", "rejected_ids"):
        text = tokenizer.decode(example["prompt_ids"] + example[answer])
        assert text.replace(" ", "").count(question.replace(" ", "")) == 1, text
    assert question.replace(" ", "") not in tokenizer.decode(example["chosen_ids"]).replace(" ", "")
