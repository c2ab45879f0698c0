"""Every run setting documents itself and says where the page's form shows it: each field
of RunConfig and of every model it nests (S3 source, nodes, GRPO rewards) has a
description, a label and a section in the JSON schema the page reads from /openapi.json."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field, create_model

from tunelab.config.form import form
from tunelab.config.run_config import RunConfig


def every_property(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """`Model.field` -> its schema, for the model and every model its schema refers to."""
    schema = model.model_json_schema()
    found = {f"{model.__name__}.{name}": prop for name, prop in schema["properties"].items()}
    for def_name, nested in schema.get("$defs", {}).items():
        found.update({f"{def_name}.{name}": prop for name, prop in nested.get("properties", {}).items()})
    return found


def missing_words(model: type[BaseModel]) -> list[str]:
    return [f"{name}: no {key}" for name, prop in every_property(model).items()
            for key in ("description", "label", "section") if not str(prop.get(key) or "").strip()]


def test_every_setting_has_a_description_a_label_and_a_section():
    properties = every_property(RunConfig)
    # The nested models are walked too, not only RunConfig's own fields.
    assert {"S3Source.bucket", "NodesConfig.count", "RewardSpec.weight"} <= set(properties)
    assert len(properties) > len(RunConfig.model_fields)
    assert missing_words(RunConfig) == []


def test_the_check_finds_a_setting_without_its_words():
    # A new setting declared without them, one level down, is named with what it lacks.
    inner = create_model("Inner", given=(int, Field(1, description="d", json_schema_extra=form("Given", "Data"))),
                         bare=(int, Field(2, description="only a description")))
    outer = create_model("Outer", inner=(inner, Field(description="a group", json_schema_extra=form("Inner", "Data"))),
                         plain=(int, 3))
    assert sorted(missing_words(outer)) == ["Inner.bare: no label", "Inner.bare: no section", "Outer.plain: no description",
                                            "Outer.plain: no label", "Outer.plain: no section"]


def test_no_two_settings_share_a_place_on_the_form():
    orders = [(prop["order"], name) for name, prop in every_property(RunConfig).items() if "order" in prop]
    assert len(orders) > 90
    seen: dict[int, str] = {}
    for order, name in orders:
        assert order not in seen, f"{name} and {seen[order]} both have order {order}"
        seen[order] = name


@pytest.mark.parametrize("hints, expected", [
    ({}, {"label": "L", "section": "S"}),
    ({"order": 5, "help": "h", "adapter_only": True, "wide": False}, {"label": "L", "section": "S", "order": 5, "help": "h", "adapterOnly": True}),
])
def test_form_writes_only_the_hints_given(hints, expected):
    assert form("L", "S", **hints) == expected
