"""One preference row as TRL's conversational row: prompt, chosen, rejected (or prompt,
completion, label) as lists of {"role", "content"} turns, split as TRL splits them.

The training data (`methods/preference`) and the dataset preview both go through
`row_turns`, so the preview shows the turns the model trains on. The rules, per shape
(`preference_formats` names the shapes):
  - string cells become one user turn (the prompt) or one assistant turn (an answer),
    so every row is rendered with the model's chat template;
  - turn lists keep their turns: role/content, or sharegpt from/value with the speaker
    mapped as for sharegpt data (`role_mapping` names others); a single turn object
    (LLaMA-Factory's chosen/rejected) is a list of one;
  - a conversational prompt is kept as given (TRL's `maybe_extract_prompt` leaves it);
  - otherwise, when chosen and rejected open with the same turns (or text), those are
    the prompt and each keeps the rest: TRL's `extract_prompt`. A string prompt beside
    such conversations is not read, as in TRL: it repeats their first user turn
    (UltraFeedback), and keeping both would train on that turn twice;
  - answers without a shared opening take their prompt from the string prompt, or
    else from the row's conversation column (LLaMA-Factory's sharegpt files, with an
    optional `system` column);
  - LLaMA-Factory's KTO rows: the conversation's last turn, an assistant's, is the
    completion and the turns before it the prompt.
A dict or list where text belongs is an error naming the row, the column and the shape
expected, never its Python text. Torch-free.
"""

from __future__ import annotations

from typing import Any

from tunelab.worker.data.rows import DataFormatError, _map_role, conversation_column

Turns = list[dict[str, str]]
TURN_SHAPE = '{"role": "assistant", "content": "Paris."} (or sharegpt {"from": "gpt", "value": "Paris."})'
ANSWER_SHAPE = f"a string, one turn object such as {TURN_SHAPE}, or a list of such turns"
PROMPT_SHAPE = 'a string or a list of turns such as [{"role": "user", "content": "What is the capital of France?"}]'


class RowPlace:
    """Which row an error is about: its index and which data (training or eval) holds it."""

    def __init__(self, index: int | None = None, what: str = "training"):
        self.index, self.what = index, what

    def where(self) -> str:
        return f"row {self.index} of the {self.what} data" if self.index is not None else f"a row of the {self.what} data"

    def error(self, column: str, problem: str) -> DataFormatError:
        return DataFormatError("dataset", f"{self.where()}, column '{column}': {problem}")


def row_turns(row: dict[str, Any], role_mapping: dict[str, str] | None = None, place: RowPlace | None = None) -> dict[str, Any]:
    """The row as TRL's conversational preference (or unpaired preference) row."""
    roles, place = role_mapping or {}, place or RowPlace()
    if "chosen" in row and "rejected" in row:
        return _paired(row, roles, place)
    return _unpaired(row, roles, place)


def prompt_turns(value: Any, role_mapping: dict[str, str] | None = None, place: RowPlace | None = None) -> Turns:
    """A prompt cell as turns: a string is one user turn, turns stay turns."""
    roles, place = role_mapping or {}, place or RowPlace()
    if isinstance(value, (list, dict)):
        return _turns(value, "prompt", roles, place)
    return [{"role": "user", "content": _text(value, "prompt", PROMPT_SHAPE, place)}]


def _paired(row: dict[str, Any], roles: dict[str, str], place: RowPlace) -> dict[str, Any]:
    chosen, rejected = (_answer(row[column], column, roles, place) for column in ("chosen", "rejected"))
    prompt = row.get("prompt")
    if isinstance(chosen, str) != isinstance(rejected, str):
        raise place.error("chosen", "chosen and rejected differ in shape (one is text, the other turns); give both as "
                                    "strings or both as turn lists")
    if isinstance(chosen, str):
        opening = prompt_turns(prompt, roles, place) if prompt is not None else _conversation(row, roles, place)
        if not opening:
            text, chosen, rejected = _shared_text(chosen, rejected, place)
            opening = prompt_turns(text, roles, place)
        return {"prompt": opening, "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}]}
    if isinstance(prompt, (list, dict)):
        return {"prompt": _turns(prompt, "prompt", roles, place), "chosen": chosen, "rejected": rejected}
    shared = _shared_turns(chosen, rejected)
    if shared:
        opening = chosen[:shared]
        chosen, rejected = chosen[shared:], rejected[shared:]
        if not chosen or not rejected:
            raise place.error("chosen", "chosen and rejected are the same conversation, so there is no answer to prefer; "
                                        "remove the row or fix its answers")
        return {"prompt": opening, "chosen": chosen, "rejected": rejected}
    if prompt is not None:
        return {"prompt": prompt_turns(prompt, roles, place), "chosen": chosen, "rejected": rejected}
    opening = _conversation(row, roles, place)
    if not opening:
        raise place.error("prompt", "the row has no prompt: no prompt column, no conversation column, and chosen and rejected "
                                    "open with different turns. Add a prompt column (map one with column_mapping, e.g. "
                                    "{prompt: question}) or give chosen/rejected as whole conversations")
    return {"prompt": opening, "chosen": chosen, "rejected": rejected}


def _unpaired(row: dict[str, Any], roles: dict[str, str], place: RowPlace) -> dict[str, Any]:
    label = _label(row.get("label"), place)
    if "completion" in row:
        completion = _answer(row["completion"], "completion", roles, place)
        if isinstance(completion, str):
            completion = [{"role": "assistant", "content": completion}]
        return {"prompt": prompt_turns(row.get("prompt"), roles, place), "completion": completion, "label": label}
    turns = _conversation(row, roles, place)
    if len(turns) < 2 or turns[-1]["role"] != "assistant":
        column = conversation_column(list(row)) or "messages"
        raise place.error(column, f"expected a conversation that ends with the assistant's answer (the completion the label "
                                  f"judges) after at least one prompt turn; this one has roles {[t['role'] for t in turns]}")
    return {"prompt": turns[:-1], "completion": turns[-1:], "label": label}


def _answer(value: Any, column: str, roles: dict[str, str], place: RowPlace) -> str | Turns:
    if isinstance(value, (list, dict)):
        return _turns(value, column, roles, place)
    return _text(value, column, ANSWER_SHAPE, place)


def _turns(value: list[Any] | dict[str, Any], column: str, roles: dict[str, str], place: RowPlace) -> Turns:
    items = [value] if isinstance(value, dict) else value
    if not items:
        raise place.error(column, f"an empty turn list; expected {ANSWER_SHAPE if column != 'prompt' else PROMPT_SHAPE}")
    return [_turn(turn, column, roles, place) for turn in items]


def _turn(turn: Any, column: str, roles: dict[str, str], place: RowPlace) -> dict[str, str]:
    if isinstance(turn, dict) and turn.get("role") is not None and "content" in turn:
        role, content = _map_role(_text(turn["role"], column, "a role name", place), "chatml", roles), turn["content"]
    elif isinstance(turn, dict) and turn.get("from") is not None and "value" in turn:
        role, content = _map_role(_text(turn["from"], column, "a speaker name", place), "sharegpt", roles), turn["value"]
    else:
        raise place.error(column, f"a turn is {_short(turn)}; expected {TURN_SHAPE}")
    return {"role": role, "content": _text(content, column, "a string (the turn's text)", place)}


def _text(value: Any, column: str, expected: str, place: RowPlace) -> str:
    """A text cell as text; a dict or list here would only become its Python text."""
    if isinstance(value, (dict, list)):
        raise place.error(column, f"{'a dict' if isinstance(value, dict) else 'a list'} {_short(value)} where text belongs; "
                                  f"expected {expected}")
    return "" if value is None else str(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:120] + "…"


def _shared_turns(chosen: Turns, rejected: Turns) -> int:
    """How many opening turns chosen and rejected share (TRL's `extract_prompt`)."""
    count = 0
    for a, b in zip(chosen, rejected):
        if a != b:
            break
        count += 1
    return count


def _shared_text(chosen: str, rejected: str, place: RowPlace) -> tuple[str, str, str]:
    """TRL's `extract_prompt` on strings: the shared opening text is the prompt, and a
    space before the first difference stays with the answers."""
    index = 0
    while index < min(len(chosen), len(rejected)) and chosen[index] == rejected[index]:
        index += 1
    if 0 < index < min(len(chosen), len(rejected)) and chosen[index - 1] == " ":
        index -= 1
    if index == 0:
        raise place.error("prompt", "the row has no prompt column and chosen and rejected share no opening text to take "
                                    "as the prompt; add a prompt column (map one with column_mapping, e.g. {prompt: question})")
    return chosen[:index], chosen[index:], rejected[index:]


def _conversation(row: dict[str, Any], roles: dict[str, str], place: RowPlace) -> Turns:
    """The row's conversation column as turns, with its `system` column (LLaMA-Factory's) first."""
    column = conversation_column(list(row))
    if column is None or row.get(column) is None:
        return []
    turns = _turns(row[column], column, roles, place) if isinstance(row[column], (list, dict)) else None
    if turns is None:
        raise place.error(column, f"{_short(row[column])} is not a conversation; expected a list of turns such as "
                                  '[{"from": "human", "value": "What is the capital of France?"}]')
    system = _text(row.get("system"), "system", "a string", place)
    if system.strip() and turns[0]["role"] != "system":
        turns.insert(0, {"role": "system", "content": system})
    return turns


def _label(value: Any, place: RowPlace) -> bool:
    """A KTO label: true/false, 1/0 or their words; anything else is refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise DataFormatError("column_mapping", f"{place.where()}: a label is {value!r}; "
                                            "unpaired_preference labels are true (a desirable completion) or false (an "
                                            "undesirable one), or 1/0")
