"""Format detection, column mapping and row rendering on real data files (no worker process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from typed_config import typed
from tunelab.worker.data.prepare import DataFormatError, detect_format, load_raw, to_messages


def _config(*files: Path, **extra):
    return typed({"local_datasets": [str(f) for f in files], "eval_steps": 0, "format": "auto", **extra})


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("attr", "expected"),
    [("alpaca", "alpaca"), ("sharegpt", "sharegpt"), ("chatml", "chatml"), ("text", "text"),
     ("alpaca_csv", "alpaca"), ("alpaca_parquet", "alpaca")],
)
def test_each_demo_file_is_detected(demo_assets, attr, expected, data_cache):
    raw = load_raw(_config(getattr(demo_assets, attr)), data_cache)
    assert raw.format == expected
    assert raw.eval is None
    assert len(raw.train) > 0


def test_alpaca_row_becomes_user_and_assistant_turns():
    row = {"instruction": "Add.", "input": "2 and 3", "output": "5", "system": "Be brief."}
    assert to_messages(row, "alpaca", typed()) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Add.\n\n2 and 3"},
        {"role": "assistant", "content": "5"},
    ]
    assert to_messages({"instruction": "Hi", "input": None, "output": "Hello"}, "alpaca", typed())[0] == {"role": "user", "content": "Hi"}


def test_sharegpt_function_calling_roles_are_mapped(demo_assets, data_cache):
    raw = load_raw(_config(demo_assets.sharegpt), data_cache)
    with_tools = next(r for r in raw.train if any(t["from"] == "function_call" for t in r["conversations"]))
    roles = [m["role"] for m in to_messages(with_tools, "sharegpt", typed())]
    # system, human, function_call (the model's call), observation (the tool's answer), gpt
    assert roles == ["system", "user", "assistant", "tool", "assistant"]


def test_role_mapping_overrides_the_defaults(demo_assets, data_cache):
    raw = load_raw(_config(demo_assets.sharegpt), data_cache)
    with_tools = next(r for r in raw.train if any(t["from"] == "observation" for t in r["conversations"]))
    roles = [m["role"] for m in to_messages(with_tools, "sharegpt", typed(role_mapping={"observation": "user"}))]
    assert roles[3] == "user"


def test_unknown_sharegpt_speaker_names_role_mapping(tmp_path, data_cache):
    path = tmp_path / "odd.jsonl"
    _write_jsonl(path, [{"conversations": [{"from": "narrator", "value": "Once"}, {"from": "gpt", "value": "upon"}]}])
    raw = load_raw(_config(path), data_cache)
    with pytest.raises(DataFormatError) as err:
        to_messages(raw.train[0], raw.format, typed())
    assert err.value.field == "role_mapping" and "narrator" in str(err.value)


def test_chatml_roles_pass_through(demo_assets, data_cache):
    raw = load_raw(_config(demo_assets.chatml), data_cache)
    messages = to_messages(raw.train[0], "chatml", typed())
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    assert messages[2]["content"].startswith("The sum is")


def test_ambiguous_columns_error_lists_what_was_seen(tmp_path, data_cache):
    path = _write_jsonl(tmp_path / "qa.jsonl", [{"question": "2+2?", "answer": "4", "source": "quiz"}] * 3)
    with pytest.raises(DataFormatError) as err:
        load_raw(_config(path), data_cache)
    message = str(err.value)
    assert err.value.field == "format"
    for column in ("question", "answer", "source"):
        assert column in message
    assert "column_mapping" in message


def test_column_mapping_renames_onto_alpaca(tmp_path, data_cache):
    path = _write_jsonl(tmp_path / "qa.jsonl", [{"question": "2+2?", "answer": "4", "source": "quiz"}] * 3)
    raw = load_raw(_config(path, column_mapping={"instruction": "question", "output": "answer"}), data_cache)
    assert raw.format == "alpaca"
    assert to_messages(raw.train[0], raw.format, typed())[-1] == {"role": "assistant", "content": "4"}


def test_column_mapping_to_a_missing_column_names_the_columns(tmp_path, data_cache):
    path = _write_jsonl(tmp_path / "qa.jsonl", [{"question": "2+2?", "answer": "4"}])
    with pytest.raises(DataFormatError) as err:
        load_raw(_config(path, column_mapping={"instruction": "prompt"}), data_cache)
    assert err.value.field == "column_mapping" and "question" in str(err.value) and "prompt" in str(err.value)


def test_single_string_column_is_raw_text(tmp_path, data_cache):
    path = _write_jsonl(tmp_path / "docs.jsonl", [{"body": "first document"}, {"body": "second"}])
    raw = load_raw(_config(path), data_cache)
    assert raw.format == "text" and raw.train.column_names == ["text"]
    assert to_messages(raw.train[0], "text", typed()) == "first document"


def test_explicit_format_checks_its_columns(demo_assets, data_cache):
    with pytest.raises(DataFormatError) as err:
        load_raw(_config(demo_assets.text, format="alpaca"), data_cache)
    assert "instruction" in str(err.value) and "text" in str(err.value)


def test_conversation_with_unknown_turn_keys_is_explained():
    rows = [{"messages": [{"speaker": "a", "text": "hi"}]}]
    with pytest.raises(DataFormatError) as err:
        detect_format(["messages"], rows)
    assert "speaker" in str(err.value) and "role/content" in str(err.value)


def test_openai_text_parts_read_as_text_and_a_dict_where_text_belongs_is_an_error(tmp_path, data_cache):
    # OpenAI's message format allows content as a list of parts; text-only parts are text.
    parts = [{"type": "text", "text": "What is 2+2?"}, {"type": "text", "text": "Answer briefly."}]
    rows = [{"messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": "4"}]}]
    raw = load_raw(_config(_write_jsonl(tmp_path / "parts.jsonl", rows)), data_cache)
    messages = to_messages(raw.train[0], raw.format, typed())
    assert messages == [{"role": "user", "content": "What is 2+2?\nAnswer briefly."}, {"role": "assistant", "content": "4"}]
    # A turn object where an answer's text belongs (LLaMA-Factory's DPO objects in an SFT file)
    # must never train as Python's dict text.
    with pytest.raises(DataFormatError, match=r"column 'output' holds a dict .* where text belongs") as caught:
        to_messages({"instruction": "2+2?", "output": {"from": "gpt", "value": "4"}}, "alpaca", typed())
    assert caught.value.field == "dataset"
    with pytest.raises(DataFormatError, match=r"content parts include \['image_url'\]"):
        to_messages({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                                  {"role": "assistant", "content": "a cat"}]}, "chatml", typed())
    with pytest.raises(DataFormatError, match=r"column 'messages\[\].content' holds a dict"):
        to_messages({"messages": [{"role": "user", "content": {"text": "hi"}}, {"role": "assistant", "content": "4"}]},
                    "chatml", typed())
