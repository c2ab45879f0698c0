"""The form's fields are the server's own description of a run: every RunConfig setting
in /openapi.json has its input, labelled and placed as its schema says, defaults left
out of what the form sends; a setting the schema gains appears on the form without a
page change; and "check dataset" sends only fields the preview route takes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tunelab.server.schemas import DatasetPreviewRequest

pytestmark = pytest.mark.browser

STATIC_JS = Path(__file__).resolve().parents[2] / "tunelab" / "server" / "static" / "js"
# The method picker stands for these settings rather than showing an input for each.
METHOD_FIELDS = {"training_type", "use_dora", "use_rslora", "use_loftq"}
# The form's own pickers, not settings.
PICKERS = {"method", "source"}
RENDERED_JS = """() => [...document.querySelectorAll('#config-form [data-field]')]
  .filter((block) => !['method', 'source'].includes(block.dataset.field))
  .map((block) => ({name: block.dataset.field, label: block.querySelector('label').textContent,
                    section: block.closest('details')?.querySelector('summary')?.textContent ?? null}))"""


def schema_fields(server) -> dict[str, dict]:
    """Every input the schema asks for: `name` or `group.name` -> its schema."""
    schemas = httpx.get(server.url + "openapi.json").json()["components"]["schemas"]
    fields = {}
    for name, prop in schemas["RunConfig"]["properties"].items():
        if name in METHOD_FIELDS:
            continue
        refs = [v["$ref"].rsplit("/", 1)[1] for v in prop.get("anyOf", [prop]) if "$ref" in v]
        group = schemas[refs[0]] if refs else {}
        if "properties" in group:
            fields.update({f"{name}.{inner}": p for inner, p in group["properties"].items()})
        else:
            fields[name] = prop
    return fields


def test_every_setting_of_the_schema_has_its_input_labelled_and_placed_as_the_schema_says(server, open_page):
    expected = schema_fields(server)
    assert len(expected) > 90 and {"s3.bucket", "nodes.count", "model_name"} <= set(expected)
    page = open_page()
    expect(page.get_by_label("Model", exact=True)).to_be_visible()
    rendered = {block["name"]: block for block in page.evaluate(RENDERED_JS)}
    assert sorted(rendered) == sorted(expected)
    for name, prop in expected.items():
        assert rendered[name]["label"] == prop["label"], name
        # A basic section is one of the page's own places; any other is a folded section of that name.
        folded = rendered[name]["section"]
        if prop["section"] in ("model", "data", "train"):
            assert folded is None, name
        elif prop["section"] == "more":
            assert folded.startswith("More training settings"), name
        else:
            assert folded == prop["section"], name

    # Every input starts at its schema default: a form given only a model and data sends nothing else.
    page.get_by_label("Model", exact=True).fill("/models/tiny")
    page.get_by_label("Data files").fill("/data/train.jsonl")
    page.get_by_role("button", name="Preview command").click()
    yaml_text = page.locator("#command-yaml").inner_text()
    assert yaml_text == "training_type: lora\nmodel_name: /models/tiny\nlocal_datasets:\n  - /data/train.jsonl\n"


def test_a_setting_the_schema_gains_appears_on_the_form(server, open_page):
    # The server's own schema with one more setting and one more section: what a new
    # RunConfig field brings, without a page change.
    schema = httpx.get(server.url + "openapi.json").json()
    properties = schema["components"]["schemas"]["RunConfig"]["properties"]
    properties["warmup_floor"] = {"type": "integer", "default": 5, "description": "d", "label": "Warmup floor",
                                  "section": "Optimiser", "order": 565, "help": "Never warm up for fewer steps."}
    properties["probe_mode"] = {"type": "string", "enum": ["off", "on"], "default": "off", "description": "d",
                                "label": "Probe mode", "section": "Probes"}
    page = open_page()
    page.route("**/openapi.json", lambda route: route.fulfill(json=schema))
    page.reload()  # signed in already: the token stays in the page's storage
    floor = page.locator('[data-field="warmup_floor"]')
    expect(floor).to_be_attached()  # the form is drawn once the schema arrives
    page.evaluate("() => document.querySelectorAll('#config-form details').forEach((d) => { d.open = true; })")

    expect(floor.get_by_label("Warmup floor")).to_have_value("5")
    expect(floor).to_contain_text("Never warm up for fewer steps.")
    # In its section, at its place: after "Warmup steps" (order 560), before "Warmup ratio" (570).
    names = page.eval_on_selector_all("details:has(> summary:text-is('Optimiser')) [data-field]",
                                      "(blocks) => blocks.map((b) => b.dataset.field)")
    assert names[names.index("warmup_steps") + 1] == "warmup_floor"
    assert names[names.index("warmup_floor") + 1] == "warmup_ratio"
    # A section no field had before is a folded section of its own, after the others.
    summaries = page.locator('[data-fields="advanced"] > details > summary').all_inner_texts()
    assert summaries[-1] == "Probes"
    probe = page.get_by_label("Probe mode")
    assert probe.locator("option").all_inner_texts() == ["off", "on"]

    page.get_by_label("Model", exact=True).fill("/models/tiny")
    page.get_by_label("Data files").fill("/data/train.jsonl")
    floor.get_by_label("Warmup floor").fill("9")
    probe.select_option("on")
    page.get_by_role("button", name="Preview command").click()
    yaml_text = page.locator("#command-yaml").inner_text()
    assert "warmup_floor: 9\n" in yaml_text and "probe_mode: 'on'\n" in yaml_text


def test_check_dataset_sends_only_what_the_preview_route_takes():
    text = (STATIC_JS / "dataset-check.js").read_text()
    block = re.search(r"const PREVIEW_FIELDS = \[(.*?)\];", text, re.S).group(1)
    sent = set(re.findall(r'"(\w+)"', block))
    assert sent, "PREVIEW_FIELDS could not be read"
    assert sent <= set(DatasetPreviewRequest.model_fields), sorted(sent - set(DatasetPreviewRequest.model_fields))
