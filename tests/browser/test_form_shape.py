"""The configure form as a newcomer meets it: every problem of a submit shown at once
beside its field in plain words (folded sections opening to show theirs) with a notice
naming the fields; "Preview command" giving the `tunelab train` file and command that
tunelab itself reads back as the same config; a form short enough on a phone, with the
run panel one tap away; and a disabled Stop that does not look like a live red button."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tunelab.config.run_config import parse_config
from tunelab.config.files import load_config_file

pytestmark = pytest.mark.browser

# Every field of the form shown, as the page was before it folded (what issue 34 measured).
OPEN_EVERY_SECTION_JS = "() => document.querySelectorAll('#config-form details').forEach((d) => { d.open = true; })"
FORM_HEIGHT_JS = "() => document.getElementById('configure').getBoundingClientRect().height"


def field_error(page, name: str):
    return page.locator(f'[data-field="{name}"] .field-error')


def test_four_bad_fields_show_four_messages_at_once_beside_their_fields(server, open_page, fill_demo_config,
                                                                       open_section, shoot):
    page = open_page()
    fill_demo_config(page, max_steps=5)
    page.get_by_label("Model", exact=True).fill("")                     # required
    page.get_by_label("Learning rate", exact=True).fill("fast")          # the page cannot read it
    page.get_by_label("Batch size").fill("0")                            # out of range, under "More"
    open_section(page, "Optimiser")
    page.get_by_label("Warmup steps").fill("3")                          # a clash of two settings,
    page.get_by_label("Warmup ratio").fill("0.1")                        # under "Advanced > Optimiser"
    # Everything folded again, as a newcomer leaves it.
    for title in ("Optimiser", "Advanced settings", "More training settings"):
        page.locator("summary").filter(has_text=title).first.click()
    expect(page.get_by_label("Batch size")).to_be_hidden()

    page.get_by_role("button", name="Start training").click()
    expect(field_error(page, "model_name")).to_have_text("Model is required")
    expect(field_error(page, "learning_rate")).to_contain_text("Learning rate: “fast” is not a number")
    expect(field_error(page, "batch_size")).to_have_text("Batch size must be 1 or more")
    expect(field_error(page, "warmup_ratio")).to_have_text("Warmup ratio: set warmup_steps or warmup_ratio, not both")
    shown = page.locator("#config-form .field-error:not(:empty)")
    expect(shown).to_have_count(4)
    for i in range(4):
        expect(shown.nth(i)).to_be_visible()  # the folds that hold them opened by themselves
    expect(page.get_by_label("Model", exact=True)).to_be_focused()
    notice = page.locator("#notices .notice-error").last
    expect(notice).to_contain_text("4 settings need fixing")
    expect(notice).to_contain_text("Model")
    expect(notice).to_contain_text("Warmup ratio")
    assert "Input should" not in page.locator("#config-form").inner_text()
    shoot(page, "form-1-four-errors")

    # One left: the notice says which field and what is wrong with it.
    page.get_by_label("Learning rate", exact=True).fill("2e-4")
    page.get_by_label("Batch size").fill("2")
    page.get_by_label("Warmup ratio").fill("")
    page.get_by_role("button", name="Start training").click()
    expect(page.locator("#notices .notice-error").last).to_have_text("Not started: Model is required.")
    expect(page.locator("#config-form .field-error:not(:empty)")).to_have_count(1)
    assert server.json("GET", "/api/runs")["total"] == 0


def test_preview_command_is_the_file_and_command_tunelab_reads_as_the_same_config(
        server, open_page, demo_assets, fill_demo_config, open_section, tmp_path: Path, shoot):
    page = open_page()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    fill_demo_config(page, max_steps=7, name="preview run")
    page.get_by_label("Method").select_option("dora")
    page.get_by_label("Learning rate", exact=True).fill("1e-4")
    open_section(page, "Data")
    page.get_by_label("Column mapping").fill("instruction: question")
    open_section(page, "Model access")
    page.get_by_label("Hub token").fill("hf_secret_value")

    page.get_by_role("button", name="Preview command").click()
    dialog = page.get_by_role("dialog", name="The same run from a terminal")
    expect(dialog).to_be_visible()
    expect(page.locator("#command-check")).to_have_text("The server accepts this config.")
    expect(page.locator("#command-line")).to_have_text("tunelab train ./preview-run.yaml")
    yaml_text = page.locator("#command-yaml").inner_text()
    assert "hf_secret_value" not in yaml_text  # secrets never travel in a config file
    saved = tmp_path / "preview-run.yaml"
    saved.write_text(yaml_text)
    expected = parse_config({
        "model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "max_seq_length": 128,
        "max_steps": 7, "batch_size": 2, "gradient_accumulation_steps": 1, "display_name": "preview run",
        "training_type": "lora", "use_dora": True, "learning_rate": 1e-4, "column_mapping": {"instruction": "question"},
    })
    assert load_config_file(saved).public() == expected.public()
    shoot(page, "form-2-preview-command")

    # Copy gives one paste for a terminal: it writes that very file, then trains on it.
    dialog.get_by_role("button", name="Copy", exact=True).click()
    expect(page.locator("#notices")).to_contain_text("Copied the file and command.")
    snippet = page.evaluate("navigator.clipboard.readText()")
    writes, command = snippet.rsplit("\n", 1)
    assert command == "tunelab train ./preview-run.yaml"
    subprocess.run(["bash", "-c", writes], cwd=tmp_path / "..", check=True)
    assert (tmp_path.parent / "preview-run.yaml").read_text() == yaml_text
    dialog.get_by_role("button", name="Copy YAML").click()
    assert page.evaluate("navigator.clipboard.readText()") == yaml_text
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()

    # A config a start would refuse is said so in the preview, naming the field.
    page.get_by_label("Data files").fill("/etc/hostname")
    page.get_by_role("button", name="Preview command").click()
    expect(page.locator("#command-check")).to_contain_text("A start would be refused: Data files:")


def test_the_form_is_short_on_a_phone_and_the_run_panel_one_tap_away(server, open_page, shoot):
    page = open_page(width=390, height=844)
    expect(page.locator("#runs-empty")).to_be_visible()
    folded = page.evaluate(FORM_HEIGHT_JS)
    page.evaluate(OPEN_EVERY_SECTION_JS)
    unfolded = page.evaluate(FORM_HEIGHT_JS)
    print(f"configure form at 390x844: {folded:.0f}px folded, {unfolded:.0f}px with every section open")
    assert folded < unfolded / 4, (folded, unfolded)
    assert folded < 2000, folded
    page.reload()
    expect(page.locator("#runs-empty")).to_be_visible()
    shoot(page, "form-3-phone-folded")

    # The run panel: a link at the top of the page, in the first screen.
    link = page.get_by_role("navigation", name="Sections").get_by_role("link", name="Current run")
    expect(link).to_be_in_viewport()
    link.click()
    expect(page.locator("#current-title")).to_be_in_viewport()


def test_a_disabled_button_does_not_look_like_a_live_one(server, open_page):
    page = open_page()
    stop = page.get_by_role("button", name="Stop…")
    expect(stop).to_be_disabled()
    colours = page.evaluate("""() => {
        const probe = document.createElement("div");
        probe.style.background = "var(--danger)";
        document.body.append(probe);
        const danger = getComputedStyle(probe).backgroundColor;
        probe.remove();
        const stop = getComputedStyle(document.getElementById("stop-run"));
        return { danger, stop: stop.backgroundColor };
    }""")
    assert colours["stop"] != colours["danger"], colours
