"""A text-to-speech run in the history: its spoken samples listed per eval step, each
playable and the same bytes as on disk, all of them as a zip."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile
from playwright.sync_api import expect
from run_helpers import finished_tts_run

pytestmark = [pytest.mark.browser]


def _tts_run(server, output_dir: Path, model: str = "tiny-tts") -> int:
    """A finished text-to-speech run recorded in the server's store, its folder `output_dir`."""
    from tunelab.store import Store

    with Store(server.home / "tunelab.db") as store:
        return finished_tts_run(store, output_dir, model)


def test_the_history_lists_a_tts_runs_samples_per_step_to_play_and_download(server, open_page, tmp_path, shoot):
    output = tmp_path / "tts-run"
    (output / "samples").mkdir(parents=True)
    for step, seconds in ((40, 0.5), (20, 0.25)):
        soundfile.write(output / "samples" / f"step-{step}.wav", np.sin(np.arange(int(16000 * seconds)) / 5) * 0.2, 16000)
    (output / "samples" / ".step-60.wav").write_bytes(b"half written")  # a sample being written is not listed
    run_id = _tts_run(server, output)
    quiet = _tts_run(server, tmp_path / "no-samples")
    from tunelab.store import Store

    with Store(server.home / "tunelab.db") as store:
        text_run = store.create_run({"model_name": "demo"}, "demo", "alpaca")
        store.set_modality(text_run, "text")

    page = open_page()
    item = page.locator(f'#runs-list li[data-run-id="{run_id}"]')
    item.locator(".run-samples > summary").click()
    expect(item.locator(".run-samples > summary")).to_have_text("Spoken samples (2)")
    rows = item.locator(".run-sample")
    expect(rows).to_have_count(2)
    expect(rows.locator(".run-sample-step")).to_have_text(["Step 20", "Step 40"])  # oldest step first
    size = (output / "samples" / "step-40.wav").stat().st_size
    expect(rows.nth(1).locator(".run-sample-file")).to_have_text(f"step-40.wav · {size / 1024:.0f} KB")

    rows.nth(1).get_by_role("button", name=f"Play the sample of Run #{run_id} at step 40").click()
    player = item.get_by_label(f"Spoken sample of Run #{run_id} at step 40")
    expect(player).to_be_visible()
    page.wait_for_function("(node) => node.readyState >= 1 && node.duration > 0.4", arg=player.element_handle())
    played = player.evaluate("async (node) => Array.from(new Uint8Array(await (await fetch(node.src)).arrayBuffer()))")
    assert bytes(played) == (output / "samples" / "step-40.wav").read_bytes()
    shoot(page, "tts-history-samples")

    with page.expect_download() as download:
        item.get_by_role("button", name=f"Download every spoken sample of Run #{run_id}").click()
    archive = zipfile.ZipFile(io.BytesIO(Path(download.value.path()).read_bytes()))
    assert sorted(archive.namelist()) == ["step-20.wav", "step-40.wav"]
    assert archive.read("step-20.wav") == (output / "samples" / "step-20.wav").read_bytes()

    other = page.locator(f'#runs-list li[data-run-id="{quiet}"]')
    other.locator(".run-samples > summary").click()
    expect(other.locator(".run-samples-body")).to_contain_text("No spoken samples")
    # A text run speaks no samples, so its row has no such fold-out.
    expect(page.locator(f'#runs-list li[data-run-id="{text_run}"]')).to_be_visible()
    assert page.locator(f'#runs-list li[data-run-id="{text_run}"] .run-samples').count() == 0
