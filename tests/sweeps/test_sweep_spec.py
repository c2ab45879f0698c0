"""A sweep file is refused before any trial starts, naming the field, when it could not
run: checked in process (no child, no database), through the real RunConfig checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_helpers import sweep_data  # noqa: E402
from tunelab.config.run_config import ConfigError  # noqa: E402
from tunelab.sweeps.spec import check_sweep, dimensions  # noqa: E402

BAD = [
    ("unknown field", {"space": {"lora_rank": {"choice": [8, 16]}}}, "space.lora_rank", "not a run setting"),
    ("empty range", {"space": {"learning_rate": {"uniform": [1e-3, 1e-3]}}}, "space.learning_rate", "empty"),
    ("reversed range", {"space": {"num_epochs": {"int": [3, 1]}}}, "space.num_epochs", "empty"),
    ("log over zero", {"space": {"learning_rate": {"log_uniform": [0, 1e-3]}}}, "space.learning_rate", "above zero"),
    ("empty choice", {"space": {"lora_r": {"choice": []}}}, "space.lora_r", "non-empty"),
    ("unknown kind", {"space": {"lora_r": {"normal": [8, 16]}}}, "space.lora_r", "log_uniform"),
    ("not searchable", {"space": {"output_dir": {"choice": ["/a", "/b"]}}}, "space.output_dir", "base"),
    ("a corner the run refuses", {"space": {"learning_rate": {"uniform": [1e-4, 5.0]}}}, "space.learning_rate", "learning_rate"),
    ("grid over a float range", {"sampler": "grid"}, "space.learning_rate", "grid"),
    ("unknown sampler", {"sampler": "bayes"}, "sampler", ""),
    ("no trials", {"trials": 0}, "trials", ""),
    ("unknown sweep field", {"trails": 4}, "trails", ""),
]


@pytest.mark.parametrize("case, change, field, words", BAD, ids=[c[0] for c in BAD])
def test_bad_sweep_is_refused_naming_the_field(case, change, field, words):
    with pytest.raises(ConfigError) as caught:
        check_sweep(sweep_data(**change))
    err = caught.value.errors[0]
    assert err.field == field, (case, caught.value)
    assert words in err.message


def test_an_eval_metric_with_eval_off_is_refused():
    data = sweep_data()
    data["base"] = {**data["base"], "eval_steps": 0}
    with pytest.raises(ConfigError) as caught:
        check_sweep(data)
    assert caught.value.errors[0].field == "objective.metric"
    assert "eval_steps" in caught.value.errors[0].message


def test_one_output_dir_for_every_trial_is_refused():
    data = sweep_data()
    data["base"] = {**data["base"], "output_dir": "/tmp/one-folder"}
    with pytest.raises(ConfigError) as caught:
        check_sweep(data)
    assert caught.value.errors[0].field == "base.output_dir"


def test_a_bad_base_names_its_field_under_base():
    data = sweep_data()
    data["base"] = {**data["base"], "learning_rate": 3}
    with pytest.raises(ConfigError) as caught:
        check_sweep(data)
    assert caught.value.errors[0].field == "base.learning_rate"


def test_a_good_sweep_reads_its_space():
    spec = check_sweep(sweep_data(space={"learning_rate": {"log_uniform": [1e-5, 1e-3]}, "lora_r": {"choice": [8, 16]},
                                         "num_epochs": {"int": [1, 3]}, "lora_dropout": {"uniform": [0.0, 0.1]}}))
    assert dimensions(spec) == {"learning_rate": ("log_uniform", [1e-5, 1e-3]), "lora_r": ("choice", [8, 16]),
                                "num_epochs": ("int", [1, 3]), "lora_dropout": ("uniform", [0.0, 0.1])}
    assert spec.trial_config({"learning_rate": 2e-4, "lora_r": 16}, 3).display_name == "lr-rank #3"
