"""A text-to-speech run in the history: its spoken samples listed per eval step, each
playable and the same bytes as on disk, all of them as a zip; Speak shows its progress
(seconds, stage, audio tokens written) and Cancel ends the speaking on the server."""

from __future__ import annotations

import io
import re
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile
from playwright.sync_api import expect
from run_helpers import finished_tts_run, tiny_tts_model

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


def _speak_children(home: Path) -> list:
    """The speak child processes of the server on `home` (other tests' servers may speak meanwhile)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "tunelab.inference.speak_child" in (proc.info["cmdline"] or []) and proc.environ().get("TUNELAB_HOME") == str(home):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _short_speaker(model: Path, folder: Path) -> Path:
    """The tiny TTS model with room for 64 positions: whatever it is asked, it speaks a few
    frames and ends (RoPE weights fit any length; only the limit the child reads changes)."""
    import json
    import shutil

    shutil.copytree(model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 64}))
    return folder


# Records every text the progress shows and every value of its bar, however fast they change.
WATCH = """(box) => {
  window.seen = { stages: [], bars: [] };
  new MutationObserver(() => {
    const stage = box.querySelector('.speak-stage').textContent;
    if (window.seen.stages.at(-1) !== stage) window.seen.stages.push(stage);
    const bar = box.querySelector('progress');
    if (bar.hasAttribute('value')) window.seen.bars.push([bar.value, bar.max]);
  }).observe(box, { subtree: true, childList: true, characterData: true, attributes: true });
}"""


def _ask(item, run_id: int, text: str) -> None:
    item.get_by_role("button", name=f"Speak with Run #{run_id}").click()
    item.get_by_label(f"Text for Run #{run_id} to speak").fill(text)
    item.get_by_role("button", name="Speak", exact=True).click()


def test_speak_shows_its_progress_and_cancel_ends_the_speaking(server, open_page, tmp_path, shoot):
    model = tiny_tts_model(tmp_path / "tts")
    long_run = _tts_run(server, model, str(model))  # random weights speak to the limit: ~1,000 tokens
    short = _short_speaker(model, tmp_path / "short")
    short_run = _tts_run(server, short, str(short))
    page = open_page()

    # Cancel while the server works (its child loads the model, then speaks): the child ends.
    item = page.locator(f'#runs-list li[data-run-id="{long_run}"]')
    _ask(item, long_run, "one two three")
    working = item.locator(".speak-progress")
    expect(working).to_be_visible()
    expect(working.locator(".spinner")).to_be_visible()
    expect(working.locator(".speak-elapsed")).to_have_text(re.compile(r"^[1-9]\d* s$"), timeout=30_000)  # the seconds move
    deadline = time.monotonic() + 120
    while not _speak_children(server.home):
        assert time.monotonic() < deadline, "no speak child started"
        time.sleep(0.05)
    shoot(page, "speak-1-working")
    item.get_by_role("button", name=f"Cancel speaking with Run #{long_run}").click()
    expect(item.locator(".run-speak .run-error-line")).to_have_text("Cancelled.")
    expect(working).to_be_hidden()
    expect(item.get_by_label(f"Speech of Run #{long_run}")).to_be_hidden()
    deadline = time.monotonic() + 60
    while _speak_children(server.home):
        assert time.monotonic() < deadline, "cancelling left the speak child working"
        time.sleep(0.2)

    # The next request is served, to the end, its progress shown on the way.
    other = page.locator(f'#runs-list li[data-run-id="{short_run}"]')
    other.locator(".speak-progress").evaluate(WATCH)
    _ask(other, short_run, "one two")
    player = other.get_by_label(f"Speech of Run #{short_run}")
    expect(player).to_be_visible(timeout=240_000)
    page.wait_for_function("(node) => node.readyState >= 1 && node.duration > 0", arg=player.element_handle())
    expect(other.locator(".run-speak .run-error-line")).to_have_text("")
    expect(other.locator(".speak-progress")).to_be_hidden()
    seen = page.evaluate("window.seen")
    assert seen["stages"][:2] == ["Starting…", "Loading the model…"], seen
    speaking = [re.fullmatch(r"Speaking: (\d+) of at most (\d+) audio tokens", text) for text in seen["stages"][2:]]
    assert speaking and all(speaking), seen  # from its first token on, the count of tokens
    assert int(speaking[0].group(1)) == 0 and all(int(m.group(1)) < int(m.group(2)) for m in speaking)
    assert seen["bars"] and seen["bars"][0][0] == 0 and seen["bars"] == sorted(seen["bars"])
    shoot(page, "speak-2-spoken")
