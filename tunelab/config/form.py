"""How a run setting is shown on the page's Configure form.

Every field of RunConfig, and of the models it nests, carries in its JSON schema a `label`
and a `section` beside its `description` (the API and `tunelab fields` reference); the
page reads them from /openapi.json (static/js/config-fields.js) and draws its form from
them, so a new setting appears on the form as soon as it has them. The input itself
follows from the field's type (a choice list is a select, a bool a checkbox, a list a
text box with one item per line, ...).

Sections `model`, `data`, `train` and `more` are the page's essentials; any other section
is folded under "Advanced settings", in the order its first field comes. `order` places
a field on the form and in the YAML the page saves; a field without one comes after the
others, in declaration order.
"""

from __future__ import annotations

from typing import Any


def form(label: str, section: str, order: int | None = None, *, help: str | None = None, placeholder: str | None = None,
         source: str | None = None, adapter_only: bool = False, wide: bool = False,
         options: list[Any] | None = None) -> dict[str, Any]:
    """A field's `json_schema_extra`. help: the line under the input (the description is
    longer: the reference); source: the data source (local, hub, s3) whose fields it is;
    adapter_only: hidden when the method trains no adapter; wide: a full-width input;
    options: a select's choices where the type has no enum ([value, text] or value)."""
    extra: dict[str, Any] = {"label": label, "section": section}
    hints = {"order": order, "help": help, "placeholder": placeholder, "source": source,
             "adapterOnly": adapter_only or None, "wide": wide or None, "options": options}
    extra.update({key: value for key, value in hints.items() if value is not None})
    return extra
