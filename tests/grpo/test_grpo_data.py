"""GRPO's data, settings and rewards in-process: prompt_only rows detected by `format: auto`
as strings, as chat messages and through column_mapping, rendered as TRL's conversational
prompts with the reference answer; the unknown-shape error lists the columns and a working
example; impossible settings refused by config/run_config.py naming the field; the built-in rewards
score as documented; a user's reward file imported (or refused naming the field); and the
HTTP path rules applied to a reward file."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from typed_config import typed
from tunelab.config.run_config import ConfigError, parse_config
from tunelab.paths import PathNotAllowed
from tunelab.worker.context import RunSettingError
from tunelab.worker.data.formats import DataFormatError
from tunelab.worker.methods.grpo_rewards import reward_functions
from tunelab.worker.methods.registry import for_objective
from tunelab.worker.methods.grpo import GRPOMethod
from tunelab.worker.families.protocol import Loaded
from tunelab.worker.families.text.family import TextFamily
from tunelab.worker.data.sources import load_raw

TOKENIZER = type("Tok", (), {"chat_template": "{{ messages }}"})()
LOADED = Loaded(None, TOKENIZER, TOKENIZER)
CONTAINS = {"objective": "grpo", "rewards": [{"name": "contains"}]}


def _raw(path, tmp_path, **config):
    return load_raw(typed({"local_datasets": [str(path)], "format": "auto", **config}), tmp_path / "cache")


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_string_prompts_are_detected_and_become_chat_prompts_with_their_reference(prompt_data, tmp_path):
    raw = _raw(prompt_data, tmp_path)
    assert raw.format == "prompt_only"
    prepared = GRPOMethod(TextFamily()).prepare(typed(CONTAINS), LOADED, raw)
    row = prepared.train[0]
    assert set(prepared.train.column_names) == {"prompt", "reference"}
    assert row["prompt"] == [{"role": "user", "content": f"Name the colour you were given.\nThe colour is {row['reference']}."}]


def test_message_prompts_with_an_answer_column_and_mapped_columns_are_detected(prompt_messages, tmp_path):
    raw = _raw(prompt_messages, tmp_path)
    assert raw.format == "prompt_only"
    prepared = GRPOMethod(TextFamily()).prepare(typed(CONTAINS), LOADED, raw)
    assert prepared.train.column_names == ["prompt", "reference"]  # `answer` is read as the reference
    assert prepared.train[0]["prompt"][0]["role"] == "user"
    renamed = _write(tmp_path / "renamed.jsonl", [{"question": "2 + 3?", "gold": "5", "topic": "sums"}] * 3)
    raw = _raw(renamed, tmp_path / "r", column_mapping={"prompt": "question", "reference": "gold"})
    assert raw.format == "prompt_only"
    prepared = GRPOMethod(TextFamily()).prepare(typed(CONTAINS), LOADED, raw)
    assert prepared.train[0]["reference"] == "5" and prepared.train[0]["topic"] == "sums"  # other columns reach the rewards


def test_an_unknown_shape_lists_the_columns_and_a_prompt_example(tmp_path):
    data = _write(tmp_path / "odd.jsonl", [{"question": "q1", "gold": "a"}] * 3)
    with pytest.raises(DataFormatError) as info:
        _raw(data, tmp_path)
    assert info.value.field == "format"
    assert "['question', 'gold']" in info.value.message and "= prompt_only" in info.value.message
    assert "{prompt: question, reference: answer}" in info.value.message


def test_wrong_data_for_grpo_and_prompts_for_sft_name_the_setting(preference_free_alpaca, prompt_data, tmp_path):
    from tunelab.worker.data.formats import to_messages

    with pytest.raises(DataFormatError) as info:
        GRPOMethod(TextFamily()).prepare(typed(CONTAINS), LOADED, _raw(preference_free_alpaca, tmp_path))
    assert info.value.field == "format" and "alpaca" in info.value.message and "prompt_only" in info.value.message
    with pytest.raises(DataFormatError) as info:
        to_messages({"prompt": "p"}, "prompt_only", typed({"objective": "sft"}))
    assert info.value.field == "objective" and "objective=grpo" in info.value.message
    no_reference = _write(tmp_path / "bare.jsonl", [{"prompt": "say hi"}] * 3)
    with pytest.raises(DataFormatError) as info:
        GRPOMethod(TextFamily()).prepare(typed(CONTAINS), LOADED, _raw(no_reference, tmp_path / "b"))
    assert info.value.field == "rewards" and "column_mapping" in info.value.message
    assert isinstance(for_objective(typed({"objective": "grpo", "rewards": [{"name": "exact_match"}]}), TextFamily()), GRPOMethod)


@pytest.fixture
def preference_free_alpaca(demo_assets):
    return demo_assets.alpaca


BASE = {"model_name": "org/model", "local_datasets": ["data.jsonl"]}
GRPO = {**BASE, "objective": "grpo", "rewards": [{"name": "exact_match"}]}


@pytest.mark.parametrize(("overrides", "field", "words"), [
    ({"rewards": []}, "rewards", "add at least one"),
    ({"rewards": [{"name": "regex", "pattern": "(unclosed"}]}, "rewards.0.pattern", "not a valid regular expression"),
    ({"rewards": [{"name": "regex"}]}, "rewards.0.pattern", "needs a pattern"),
    ({"rewards": [{"name": "json", "pattern": "x"}]}, "rewards.0.pattern", "not an option of the json reward"),
    ({"rewards": [{"name": "python", "path": "r.py"}]}, "rewards.0.function", "needs function"),
    ({"rewards": [{"name": "python", "path": "r.txt", "function": "f"}]}, "rewards.0.path", "not a .py file"),
    ({"rewards": [{"name": "bleu"}]}, "rewards.0.name", "exact_match"),
    ({"rewards": [{"name": "contains", "weight": 0}]}, "rewards", "weight 0"),
    ({"num_generations": 3}, "num_generations", "2 x 4 = 8 completions"),
    ({"num_generations": 1}, "num_generations", "must be 2 or more"),
    ({"backend": "mlx"}, "objective", "backend=torch"),
    ({"packing": True}, "packing", "packing=false"),
    ({"format": "preference"}, "format", "format=auto or prompt_only"),
    ({"objective": "sft", "temperature": 0.7}, "temperature", "objective=sft does not read it"),
    ({"objective": "dpo"}, "rewards", "objective=dpo does not read it"),
    ({"objective": "sft", "rewards": [], "format": "prompt_only"}, "objective", "objective=grpo"),
])
def test_impossible_grpo_settings_are_refused_naming_the_field(overrides, field, words):
    with pytest.raises(ConfigError) as info:
        parse_config({**GRPO, **overrides})
    errors = {e.field: e.message for e in info.value.errors}
    assert field in errors and words in errors[field], errors


def test_grpo_settings_pass_with_their_defaults():
    config = parse_config({**GRPO, "training_type": "qlora", "rewards": [{"name": "regex", "pattern": "^red$", "weight": 0.5}]})
    assert (config.objective, config.num_generations, config.rewards[0].weight, config.load_in_4bit) == ("grpo", None, 0.5, True)
    from tunelab.config.grpo import generation_settings
    assert generation_settings(config) == {"num_generations": 4, "max_completion_length": 64, "temperature": 1.0}


def _scores(rewards, completions, **columns):
    functions, weights = reward_functions(typed({"objective": "grpo", "rewards": rewards}))
    return [f.__name__ for f in functions], weights, [f(prompts=[None] * len(completions), completions=completions, **columns)
                                                      for f in functions]


def test_the_built_in_rewards_score_as_documented():
    chat = [[{"role": "assistant", "content": " Red "}], [{"role": "assistant", "content": "it is red."}]]
    names, weights, scores = _scores([{"name": "exact_match", "weight": 2.0}, {"name": "contains"}, {"name": "regex", "pattern": "^it"},
                                      {"name": "regex", "pattern": r"\.$"}], chat, reference=["red", "red"])
    assert names == ["exact_match", "contains", "regex", "regex_2"] and weights == [2.0, 1.0, 1.0, 1.0]
    assert scores == [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0]]
    _, _, [length, valid] = _scores([{"name": "length", "max_chars": 10}, {"name": "json"}],
                                    ["x" * 10, "x" * 15, "x" * 30, '{"a": 1}', '```json\n[1, 2]\n```'])
    assert length == [0.0, -0.5, -1.0, 0.0, -0.8]
    assert valid == [0.0, 0.0, 0.0, 1.0, 1.0]
    with pytest.raises(RunSettingError) as info:
        _scores([{"name": "contains"}], ["a"])
    assert info.value.field == "rewards"


def test_a_user_reward_file_is_imported_and_its_faults_name_the_field(reward_file, tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("")
    names, _, [scores] = _scores([{"name": "python", "path": str(reward_file), "function": "has_reference"}], ["a", "b"],
                                 reference=["x", ""])
    assert names == ["has_reference"] and scores == [0.25, 0.0]
    for spec, field, words in [
        ({"path": str(tmp_path / "gone.py"), "function": "f"}, "rewards.0.path", "does not exist"),
        ({"path": str(reward_file), "function": "missing"}, "rewards.0.function", "['has_reference']"),
        ({"path": str(empty), "function": "f"}, "rewards.0.function", "defines none"),
    ]:
        with pytest.raises(RunSettingError) as info:
            reward_functions(typed({"objective": "grpo", "rewards": [{"name": "python", **spec}]}))
        assert info.value.field == field and words in info.value.message, info.value.message
    bad = tmp_path / "syntax.py"
    bad.write_text("def f(:\n")
    with pytest.raises(RunSettingError) as info:
        reward_functions(typed({"objective": "grpo", "rewards": [{"name": "python", "path": str(bad), "function": "f"}]}))
    assert info.value.field == "rewards.0.path" and "SyntaxError" in info.value.message


def test_over_http_a_reward_file_needs_the_opt_in_and_must_lie_in_the_data_roots(reward_file, home):
    from tunelab.server.errors import ApiError
    from tunelab.server.user_paths import checked_config

    config = parse_config({**GRPO, "rewards": [{"name": "python", "path": str(reward_file), "function": "has_reference"}]})
    closed = SimpleNamespace(allow_remote_code=False, allow_output_anywhere=False, allow_ray=False, allow_multi_node=False,
                             allow_reward_code=False)
    with pytest.raises(ApiError) as info:
        checked_config(config, closed)
    assert info.value.status == 403 and info.value.field == "rewards" and "--allow-reward-code" in info.value.message
    opened = SimpleNamespace(**{**vars(closed), "allow_reward_code": True})
    with pytest.raises(PathNotAllowed) as outside:
        checked_config(config, opened)
    assert outside.value.field == "rewards.0.path"
    inside = home / "datasets" / "rewards.py"
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.write_text(reward_file.read_text())
    allowed = parse_config({**GRPO, "local_datasets": [], "dataset": "org/data",
                            "rewards": [{"name": "contains"}, {"name": "python", "path": "rewards.py", "function": "has_reference"}]})
    checked = checked_config(allowed, opened)
    assert checked.rewards[1].path == str(inside.resolve()) and checked.rewards[0].path is None
    assert checked_config(parse_config({**GRPO, "local_datasets": [], "dataset": "org/data"}), closed).rewards[0].name == "exact_match"


def test_the_dataset_preview_shows_the_prompt_and_its_reference(prompt_messages, demo_assets, tmp_path):
    from tunelab.worker.preview.child import build_preview

    preview = build_preview(typed({"local_datasets": [str(prompt_messages)], "format": "auto"}), 2, str(demo_assets.model_dir), tmp_path)
    first = json.loads(prompt_messages.read_text().splitlines()[0])
    assert preview["format"] == "prompt_only" and preview["rendered_with"] == "chat_template"
    assert preview["rows"][0]["text"] == f"<|user|>\n{first['prompt'][0]['content']}<|end|>\n\n[reference]\n{first['answer']}"


def test_the_demo_config_is_a_valid_grpo_run_and_its_summary_compares_start_and_end(demo_assets):
    from tunelab.demos.grpo import grpo_demo_config, reward_summary

    config = grpo_demo_config(demo_assets, steps=30)
    assert (config.objective, config.training_type, config.max_steps) == ("grpo", "full", 30)
    assert [r.name for r in config.rewards] == ["regex", "contains"]
    extras = {"reward": {"steps": list(range(1, 11)), "values": [0.2] * 5 + [1.2] * 5},
              "rewards/contains/mean": {"steps": list(range(1, 11)), "values": [0.0] * 5 + [0.5] * 5}}
    assert reward_summary(extras) == ["reward:     0.200 -> 1.200 (mean of the first and last 5 steps)",
                                      "contains:   0.000 -> 0.500 (mean of the first and last 5 steps)"]
