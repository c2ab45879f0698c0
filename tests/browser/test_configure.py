"""The configure form against a live server: "check dataset" reports the detected format,
errors land beside the field they belong to, configs go to and from YAML files, and the
memory estimate follows the form."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from playwright.sync_api import expect

from tunelab.config.run_config import parse_config

pytestmark = pytest.mark.browser

PREVIEW_MS = 120_000


def field_error(page, name: str):
    return page.locator(f'[data-field="{name}"] .field-error')


def test_check_dataset_shows_format_columns_and_rendered_rows(server, open_page, demo_assets, shoot):
    page = open_page()
    page.get_by_label("Model", exact=True).fill(str(demo_assets.model_dir))
    page.get_by_label("Data files").fill(str(demo_assets.alpaca))
    page.get_by_role("button", name="Check dataset").click()
    expect(page.locator("#preview-format")).to_have_text("alpaca", timeout=PREVIEW_MS)
    expect(page.locator("#preview-columns")).to_have_text("instruction, input, output")
    rows_in_file = sum(1 for line in demo_assets.alpaca.read_text().splitlines() if line.strip())
    expect(page.locator("#preview-rows")).to_have_text(f"{rows_in_file:,}")
    # Rows are shown as the model reads them: through the demo model's chat template.
    rendered = page.locator(".preview-text")
    expect(rendered).to_have_count(3)
    expect(rendered.first).to_contain_text("<|assistant|>")
    shoot(page, "configure-1-dataset-alpaca")

    page.get_by_label("Data files").fill(str(demo_assets.sharegpt))
    page.get_by_role("button", name="Check dataset").click()
    expect(page.locator("#preview-format")).to_have_text("sharegpt", timeout=PREVIEW_MS)
    expect(page.locator("#preview-columns")).to_have_text("conversations")

    # A file outside the folders the server may read: refused, and said beside the field.
    page.get_by_label("Data files").fill("/etc/hostname")
    page.get_by_role("button", name="Check dataset").click()
    expect(field_error(page, "local_datasets")).to_contain_text("outside the folders", timeout=PREVIEW_MS)
    expect(page.get_by_label("Data files")).to_have_attribute("aria-invalid", "true")
    shoot(page, "configure-2-dataset-refused")


def test_bad_learning_rate_is_shown_beside_its_field(server, open_page, demo_assets, fill_demo_config, open_section, shoot):
    page = open_page()
    fill_demo_config(page)
    lr = page.get_by_label("Learning rate", exact=True)

    # Out of range: the server answers 422 naming the field; the page puts it there.
    lr.fill("5")
    page.get_by_role("button", name="Start training").click()
    expect(field_error(page, "learning_rate")).to_contain_text("between 0 and 1")
    expect(lr).to_have_attribute("aria-invalid", "true")
    expect(lr).to_be_focused()
    shoot(page, "configure-3-bad-learning-rate")

    # Not a number at all: caught before sending, with an example of what would do.
    lr.fill("fast")
    page.get_by_role("button", name="Start training").click()
    expect(field_error(page, "learning_rate")).to_contain_text("not a number")

    # Errors for several fields at once, each beside its own field.
    lr.fill("2e-4")
    page.get_by_label("Batch size").fill("0")
    page.get_by_label("Max sequence length").fill("8")
    page.get_by_role("button", name="Start training").click()
    expect(field_error(page, "batch_size")).to_have_text("Batch size must be 1 or more")
    expect(field_error(page, "max_seq_length")).to_have_text("Max sequence length must be 16 or more")
    expect(field_error(page, "learning_rate")).to_be_empty()

    # A clash between two settings under "Advanced": the section opens to show it.
    page.get_by_label("Batch size").fill("2")
    page.get_by_label("Max sequence length").fill("128")
    open_section(page, "Optimiser")
    page.get_by_label("Warmup steps").fill("3")
    page.get_by_label("Warmup ratio").fill("0.1")
    page.get_by_text("Advanced settings").click()  # folded again: the error opens it
    page.get_by_role("button", name="Start training").click()
    expect(field_error(page, "warmup_ratio")).to_contain_text("not both")
    expect(page.get_by_label("Warmup ratio")).to_be_visible()

    assert server.json("GET", "/api/runs")["total"] == 0
    assert server.json("GET", "/api/train/status")["phase"] == "idle"


def test_config_saves_to_and_loads_from_yaml(server, open_page, demo_assets, fill_demo_config, open_section, tmp_path: Path, shoot):
    page = open_page()
    fill_demo_config(page, max_steps=7, name="yaml run")
    page.get_by_label("Method").select_option("dora")
    page.get_by_label("Learning rate", exact=True).fill("1e-4")
    open_section(page, "Data")
    page.get_by_label("Column mapping").fill("instruction: question")
    open_section(page, "Model access")
    page.get_by_label("Hub token").fill("hf_secret_value")

    with page.expect_download() as download:
        page.get_by_role("button", name="Save YAML").click()
    saved = tmp_path / "saved.yaml"
    download.value.save_as(saved)
    text = saved.read_text()
    assert "hf_secret_value" not in text  # secrets never travel in a config file
    data = yaml.safe_load(text)
    config = parse_config(data)  # what the page writes, tunelab itself accepts
    assert (config.training_type, config.use_dora, config.learning_rate) == ("lora", True, 1e-4)
    assert (config.max_steps, config.max_seq_length, config.display_name) == (7, 128, "yaml run")
    assert config.local_datasets == [str(demo_assets.alpaca)]
    assert config.column_mapping == {"instruction": "question"}

    page.get_by_role("button", name="Reset form").click()
    expect(page.get_by_label("Model", exact=True)).to_have_value("")
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({
        "model_name": str(demo_assets.model_dir),
        "training_type": "lora",
        "use_rslora": True,
        "dataset": "org/some-dataset",
        "lora_r": 32,
        "gradient_checkpointing": False,
        "gpu_ids": [0, 1],
        "learning_rate": 3e-4,
        "no_such_setting": 1,
    }))
    page.locator("#yaml-file").set_input_files(str(mine))
    expect(page.get_by_label("Method")).to_have_value("rslora")
    expect(page.get_by_role("radio", name="Hugging Face hub")).to_be_checked()
    expect(page.get_by_label("Hub dataset")).to_have_value("org/some-dataset")
    expect(page.get_by_label("LoRA rank")).to_have_value("32")
    expect(page.get_by_label("Gradient checkpointing")).to_have_value("false")
    expect(page.get_by_label("GPU ids")).to_have_value("0, 1")
    expect(page.get_by_label("Learning rate", exact=True)).to_have_value("0.0003")
    expect(page.locator("#config-errors")).to_contain_text("no_such_setting")
    shoot(page, "configure-4-loaded-yaml")


def test_the_memory_estimate_follows_the_form(server, open_page, demo_assets, open_section, shoot):
    """The estimate appears once a model is named, names each term, and follows the form (debounced)."""
    page = open_page()
    panel = page.locator("#memory-estimate")
    expect(panel).to_be_hidden()
    page.get_by_label("Model", exact=True).fill(str(demo_assets.model_dir))
    expect(page.locator("#memory-total")).to_contain_text("Memory estimate:", timeout=20_000)
    for term in ("weights", "adapter", "gradients", "optimizer", "activations", "logits"):
        expect(panel.locator(f'dt[data-term="{term}"]')).to_be_visible()
    expect(page.locator("#memory-verdict")).to_contain_text("Fits: this machine's RAM")
    activations = panel.locator('dt[data-term="activations"] + dd')
    before = activations.inner_text()
    open_section(page, "More training settings")
    page.get_by_label("Batch size").fill("64")
    expect(activations).not_to_have_text(before, timeout=20_000)
    shoot(page, "configure-memory-estimate")


def test_the_memory_estimate_lists_the_models_own_code_and_its_fingerprint(server, open_page, demo_assets):
    """A model with code of its own: the panel lists the files and the fingerprint that approves them."""
    import json

    from tunelab.remote_code.approval import read_remote_code

    model = demo_assets.root / "own-code-model"  # inside the server's data roots
    model.mkdir(exist_ok=True)
    config = json.loads((demo_assets.model_dir / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModelForCausalLM": "modeling_own.Own"}}))
    (model / "modeling_own.py").write_text("raise SystemExit('never run')\n")
    page = open_page()
    page.get_by_label("Model", exact=True).fill(str(model))
    expect(page.locator("#remote-code-fingerprint")).to_contain_text(read_remote_code(str(model)).fingerprint, timeout=20_000)
    expect(page.locator("#remote-code-files")).to_contain_text("modeling_own.py")
