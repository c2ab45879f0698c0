"""The Ollama `Modelfile` written beside every GGUF export: the file, the chat template in
Ollama's (Go) template language, and the stop tokens.

A Jinja chat template cannot be translated in general, but most chat formats are fixed
text around each message. That text is found by rendering the run's own template with
marker messages (a system, a user, an assistant turn, a second user turn), reading off
what comes before and after each marker, and checking that those pieces put together
reproduce the template's own rendering of a whole conversation. When they do, the
Modelfile carries the equivalent Go template; when they do not (a template with logic
beyond per-role text), it says so and leaves TEMPLATE out, and Ollama falls back to the
chat template stored inside the GGUF file. Torch-free: `render` is handed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

# Strings no chat template adds by itself, so each one shows where a message went.
SYSTEM, USER, ASSISTANT, USER_2 = "TUNELABxSYSTEMx1", "TUNELABxUSERx1", "TUNELABxASSISTANTx1", "TUNELABxUSERx2"
Render = Callable[[list[dict[str, str]], bool], str]  # (messages, add_generation_prompt) -> text
NAME = "Modelfile"


@dataclass(frozen=True)
class TurnPieces:
    """The fixed text of a chat format: `start` once, then per message its role's text
    around the content, then `generation` where the model's answer begins."""

    start: str
    roles: dict[str, tuple[str, str]]  # role -> (before the content, after it)
    generation: str


def turn_pieces(render: Render) -> TurnPieces | None:
    """The pieces of `render`'s chat format, or None when it is not fixed text per role."""
    try:
        pieces = _pieces_from(render)
    except Exception:  # noqa: BLE001 - a template that rejects the probe messages is one we cannot express
        return None
    return pieces if pieces is not None and _reproduces(render, pieces) else None


def _msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def _split(text: str, marker: str) -> tuple[str, str] | None:
    return (text[:text.index(marker)], text[text.index(marker) + len(marker):]) if text.count(marker) == 1 else None


def _pieces_from(render: Render) -> TurnPieces | None:
    one = render([_msg("user", USER)], False)
    two = render([_msg("user", USER), _msg("assistant", ASSISTANT)], False)
    three = render([_msg("user", USER), _msg("assistant", ASSISTANT), _msg("user", USER_2)], False)
    if not (two.startswith(one) and three.startswith(two)):
        return None
    generation = render([_msg("user", USER)], True)[len(one):]
    user, assistant = _split(three[len(two):], USER_2), _split(two[len(one):], ASSISTANT)
    first = _split(one, USER)
    if user is None or assistant is None or first is None or not first[0].endswith(user[0]) or first[1] != user[1]:
        return None
    start = first[0][:len(first[0]) - len(user[0])]
    roles = {"user": user, "assistant": assistant}
    try:
        text = render([_msg("system", SYSTEM), _msg("user", USER)], False)
    except Exception:  # noqa: BLE001 - a template that refuses a system role: its Modelfile has none either
        return TurnPieces(start, roles, generation)
    # A system turn must be text of its own too; a template that folds it into the first
    # user turn, or drops a default system prompt when given one, is not fixed pieces.
    user_turn = user[0] + USER + user[1]
    system = _split(text[len(start):len(text) - len(user_turn)], SYSTEM) \
        if text.startswith(start) and text.endswith(user_turn) else None
    return None if system is None else TurnPieces(start, {**roles, "system": system}, generation)


def _reproduces(render: Render, pieces: TurnPieces) -> bool:
    conversation = [_msg("user", "Hi there."), _msg("assistant", "Hello! How can I help?"), _msg("user", "Add 3 and 4.")]
    if "system" in pieces.roles:
        conversation.insert(0, _msg("system", "You are terse."))
    built = pieces.start + "".join(pieces.roles[m["role"]][0] + m["content"] + pieces.roles[m["role"]][1] for m in conversation)
    return built + pieces.generation == render(conversation, True)


def go_template(pieces: TurnPieces) -> str:
    """The pieces as an Ollama TEMPLATE: Go's text/template over `.Messages`."""
    branches = "".join(f'{{{{ {"if" if n == 0 else "else if"} eq .Role "{role}" }}}}{_literal(before)}{{{{ .Content }}}}{_literal(after)}'
                       for n, (role, (before, after)) in enumerate(pieces.roles.items()))
    return f"{_literal(pieces.start)}{{{{ range .Messages }}}}{branches}{{{{ end }}}}{{{{ end }}}}{_literal(pieces.generation)}"


def _literal(text: str) -> str:
    # Plain text unless it would be read as template syntax or end the """ block; then a
    # Go string literal (JSON's escapes are a subset of Go's).
    if "{{" in text or "}}" in text or '"""' in text or text.endswith('"'):
        return f"{{{{ {json.dumps(text)} }}}}"
    return text


def modelfile_text(gguf_name: str, pieces: TurnPieces | None, stops: list[str], run_id: int, base: str | None = None) -> str:
    """The Modelfile for `gguf_name`: a whole model, or (with `base`) a LoRA adapter GGUF
    applied to the base model it was trained on."""
    lines = [f"# Ollama Modelfile written by tunelab for run {run_id}.",
             "# Use it from this folder:  ollama create <name> -f Modelfile  then  ollama run <name>"]
    if base is None:
        lines.append(f"FROM ./{gguf_name}")
    else:
        lines += ["# FROM may be the base model's folder (Ollama imports safetensors) or a GGUF of that same base.",
                  f"FROM {base}", f"ADAPTER ./{gguf_name}"]
    if pieces is None:
        lines.append("# No TEMPLATE: the run's chat template is more than fixed text around each message, so it has no\n"
                     "# exact Go-template form; Ollama uses the chat template stored in the GGUF file (tokenizer.chat_template).")
    else:
        lines.append(f'TEMPLATE """{go_template(pieces)}"""')
    lines += [f"PARAMETER stop {json.dumps(stop)}" for stop in stops]
    return "\n".join(lines) + "\n"


def stop_tokens(pieces: TurnPieces | None, eos_token: str | None, special_tokens: list[str]) -> list[str]:
    """The end-of-sequence token, and every special token that closes an assistant turn or
    opens a user turn (a model that runs on into the next turn stops there)."""
    closing = pieces.roles["assistant"][1] + pieces.roles["user"][0] if pieces is not None else ""
    found = [eos_token] if eos_token else []
    found += [token for token in special_tokens if token and token in closing]
    return list(dict.fromkeys(found))
