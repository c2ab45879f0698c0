"""The Ollama Modelfile's template: chat formats that are fixed text around each message
become the same format in Go's template language, checked against Jinja's own rendering;
formats with more logic than that get no TEMPLATE rather than a wrong one."""

from __future__ import annotations

import jinja2
import pytest

from tunelab.export import modelfile

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}"
          "<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
# Gemma's way: no system role; a system message is folded into the first user turn.
FOLDS_SYSTEM = ("{% set sys = messages[0]['content'] + '\n\n' if messages[0]['role'] == 'system' else '' %}"
                "{% for m in messages if m['role'] != 'system' %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
                "{{ (sys if loop.first else '') + m['content'] }}<end_of_turn>\n{% endfor %}"
                "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
REFUSES_SYSTEM = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
                  "[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}")


def renderer(source: str, bos: str = "<s>") -> modelfile.Render:
    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    template = jinja2.Environment().from_string(source)
    return lambda messages, gen: template.render(messages=messages, add_generation_prompt=gen, bos_token=bos,
                                                 raise_exception=raise_exception)


def test_chatml_becomes_a_go_template_and_stops_at_im_end():
    pieces = modelfile.turn_pieces(renderer(CHATML))
    assert pieces is not None
    stops = modelfile.stop_tokens(pieces, "<|endoftext|>", ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    text = modelfile.modelfile_text("model-q4_k_m.gguf", pieces, stops, 7)
    assert text.splitlines()[2] == "FROM ./model-q4_k_m.gguf"
    assert ('TEMPLATE """{{ range .Messages }}{{ if eq .Role "user" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n'
            '{{ else if eq .Role "assistant" }}<|im_start|>assistant\n{{ .Content }}<|im_end|>\n'
            '{{ else if eq .Role "system" }}<|im_start|>system\n{{ .Content }}<|im_end|>\n'
            '{{ end }}{{ end }}<|im_start|>assistant\n"""') in text
    assert stops == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert text.endswith('PARAMETER stop "<|endoftext|>"\nPARAMETER stop "<|im_start|>"\nPARAMETER stop "<|im_end|>"\n')


def test_text_before_the_first_message_is_kept_once():
    pieces = modelfile.turn_pieces(renderer(LLAMA3, bos="<|begin_of_text|>"))
    assert pieces is not None and pieces.start == "<|begin_of_text|>"
    assert pieces.roles["assistant"] == ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>")
    assert modelfile.go_template(pieces).startswith("<|begin_of_text|>{{ range .Messages }}")
    assert "<|eot_id|>" in modelfile.stop_tokens(pieces, "<|end_of_text|>", ["<|eot_id|>", "<|end_of_text|>"])


def test_a_template_without_a_system_role_gets_no_system_branch():
    pieces = modelfile.turn_pieces(renderer(REFUSES_SYSTEM))
    assert pieces is not None and set(pieces.roles) == {"user", "assistant"}


@pytest.mark.parametrize("source", [FOLDS_SYSTEM, "{{ messages | length }} turns"])
def test_a_template_with_more_logic_gets_no_template(source):
    assert modelfile.turn_pieces(renderer(source)) is None
    text = modelfile.modelfile_text("model-f16.gguf", None, modelfile.stop_tokens(None, "</s>", ["</s>"]), 1)
    assert "TEMPLATE" not in text.replace("# No TEMPLATE", "")
    assert "tokenizer.chat_template" in text and 'PARAMETER stop "</s>"' in text


def test_template_syntax_in_the_fixed_text_is_quoted():
    pieces = modelfile.TurnPieces(start='{{x}}', roles={"user": ("U: ", '"')}, generation="A:")
    assert modelfile.go_template(pieces) == ('{{ "{{x}}" }}{{ range .Messages }}{{ if eq .Role "user" }}U: {{ .Content }}'
                                             '{{ "\\"" }}{{ end }}{{ end }}A:')
