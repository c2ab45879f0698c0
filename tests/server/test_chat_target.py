"""Which chat template GET /api/runs/{id}/chat reports for a run's saved tokenizer: the
`chat_template.jinja` file newer tokenizers write, the `chat_template` entry of
tokenizer_config.json (one string, or named templates), or none (the route then
reports tunelab's fallback, which the inference child uses in that case)."""

from __future__ import annotations

import json

from tunelab.server.routes_chat import saved_template


def test_the_jinja_file_wins(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "other"}))
    assert saved_template(tmp_path) == "{{ messages }}"


def test_the_tokenizer_config_entry_as_a_string_or_named_templates(tmp_path):
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({"chat_template": "plain"}))
    assert saved_template(tmp_path) == "plain"
    config.write_text(json.dumps({"chat_template": [{"name": "tool_use", "template": "tools"},
                                                    {"name": "default", "template": "chat"}]}))
    assert saved_template(tmp_path) == "chat"
    config.write_text(json.dumps({"chat_template": [{"name": "rag", "template": "rag"}]}))
    assert saved_template(tmp_path) == "rag"


def test_no_template_or_an_unreadable_config_is_none(tmp_path):
    assert saved_template(tmp_path) is None
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8}))
    assert saved_template(tmp_path) is None
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    assert saved_template(tmp_path) is None
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": ""}))
    assert saved_template(tmp_path) is None
