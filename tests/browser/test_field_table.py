"""The page's field table (static/js/config-fields.js) against the Python models it
mirrors: every RunConfig setting has an input, with the same default, and "check
dataset" sends only fields the preview route takes. Needs no browser: it reads the JS."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tunelab.config.run_config import NodesConfig, RunConfig, S3Source
from tunelab.server.schemas import DatasetPreviewRequest

STATIC_JS = Path(__file__).resolve().parents[2] / "tunelab" / "server" / "static" / "js"
# f("name", "Label", "kind", default, ...) with a JSON-literal default.
FIELD_ROW = re.compile(r'^\s*f\("([\w.]+)", "[^"]*", "(\w+)", (\[\]|\{\}|null|false|true|"[^"]*"|[-\d.e]+)[,)]', re.M)
# The method picker stands for these settings rather than showing an input for each.
METHOD_FIELDS = {"training_type", "use_dora", "use_rslora", "use_loftq"}


def page_fields() -> dict[str, tuple[str, object]]:
    text = (STATIC_JS / "config-fields.js").read_text()
    rows = {name: (kind, json.loads(default)) for name, kind, default in FIELD_ROW.findall(text)}
    assert len(rows) > 40, "the field table could not be read; has its layout changed?"
    return rows


def same_default(page_default: object, python_default: object) -> bool:
    # An empty text box or list on the page means "not set", i.e. the Python None.
    if python_default is None:
        return page_default in (None, "", [], {})
    return page_default == python_default


def test_every_setting_has_an_input_with_the_same_default():
    rows = page_fields()
    top_level = {name.split(".")[0] for name in rows}
    missing = set(RunConfig.model_fields) - top_level - METHOD_FIELDS
    assert not missing, f"settings with no input on the page: {sorted(missing)}"
    unknown = top_level - set(RunConfig.model_fields)
    assert not unknown, f"page inputs for settings RunConfig does not have: {sorted(unknown)}"
    for name, (kind, default) in rows.items():
        head, _, sub = name.partition(".")
        model = {"s3": S3Source, "nodes": NodesConfig}[head] if sub else RunConfig
        field = model.model_fields[sub or head]
        if field.is_required():
            continue
        python_default = field.get_default(call_default_factory=True)
        assert same_default(default, python_default), (
            f"{name}: page default {default!r}, RunConfig default {python_default!r}")


@pytest.mark.parametrize("s3_field", sorted(S3Source.model_fields))
def test_every_s3_setting_has_an_input(s3_field: str):
    assert f"s3.{s3_field}" in page_fields()


def test_check_dataset_sends_only_what_the_preview_route_takes():
    text = (STATIC_JS / "dataset-check.js").read_text()
    block = re.search(r"const PREVIEW_FIELDS = \[(.*?)\];", text, re.S).group(1)
    sent = set(re.findall(r'"(\w+)"', block))
    assert sent, "PREVIEW_FIELDS could not be read"
    assert sent <= set(DatasetPreviewRequest.model_fields), sorted(sent - set(DatasetPreviewRequest.model_fields))
