"""A text-to-speech run through the real orchestrator and worker on the tiny Orpheus-style
Llama and its random SNAC codec: the loss falls, each eval speaks a sample wav, a stop-and-save
then resume reads the codec tokens back from the run's cache (no clip is encoded again),
the server's sample routes serve the wav behind the token and nothing else, the run
speaks text over HTTP and from `tunelab speak` (a text run is refused), and the export
carries the codec."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import soundfile
from run_helpers import export_merged, finished, recorded_orchestrator, speak_to_file, stopped_at_step

from typed_config import typed
from tunelab import paths
from tunelab.store import Store
from tunelab.demos.tts import ensure_tts_demo_assets, tts_demo_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "export"))
from export_helpers import start_server  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
STEPS = 10
RUN_WAIT_S = 400  # under a minute on two idle cores; a loaded test machine is far slower
TOKEN = "tts-test-token"


def test_tts_learns_speaks_samples_resumes_from_the_codec_cache_and_exports_the_codec(speech_assets, home, tmp_path):
    assets = ensure_tts_demo_assets(speech_assets.transcripts, tmp_path / "tts")
    with Store(paths.db_path()) as store, recorded_orchestrator(store) as (orchestrator, recorder):
        # 24 clips (22 train, 2 held out), evaluated and spoken every 4 steps.
        config = tts_demo_config(assets, speech_assets.transcripts, steps=STEPS, slice_end=24, eval_steps=4)
        first = orchestrator.start(config)
        first_row = stopped_at_step(orchestrator, recorder, first, 5, timeout=RUN_WAIT_S, wait_s=RUN_WAIT_S)
        assert first_row["status"] == "stopped", first_row["error_message"]
        assert first_row["modality"] == "tts"
        second = orchestrator.resume(first)
        row = finished(orchestrator, second, RUN_WAIT_S)
        assert row["status"] == "completed", row["error_message"]
        losses = [m["loss"] for run in (first, second) for m in store.get_metrics(run) if m["loss"] is not None]

    said = {run: [e["message"] for e in recorder.of_type("status") if e.get("run_id") == run] for run in (first, second)}
    assert any(m.startswith("Encoded 22 training clips to codec tokens") for m in said[first])
    assert any(m.startswith("Reused the codec tokens of 22 training clips") for m in said[second])
    assert not any(m.startswith("Encoded") for m in said[second])  # the resumed run encoded nothing
    assert len(losses) == STEPS and sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, losses
    output = Path(row["output_dir"])
    for step in (4, 8):
        audio, rate = soundfile.read(output / "samples" / f"step-{step}.wav")
        assert rate == 16000 and len(audio) > 0
    _sample_routes_serve_the_wav(home, first, second, output)
    _export_carries_the_codec(home, second)


def _sample_routes_serve_the_wav(home: Path, first: int, second: int, output: Path) -> None:
    server = start_server(home, TOKEN)
    try:
        client = server.client(TOKEN)
        listed = client.get(f"/api/runs/{second}/samples").json()["samples"]
        assert [s["name"] for s in listed][:2] == ["step-4.wav", "step-8.wav"] and listed[0]["step"] == 4
        wav = client.get(f"/api/runs/{second}/samples/step-8.wav")
        assert wav.status_code == 200 and wav.headers["content-type"] == "audio/wav"
        assert wav.content == (output / "samples" / "step-8.wav").read_bytes()
        assert server.client(None).get(f"/api/runs/{second}/samples/step-8.wav").status_code == 401
        # Only step-N.wav files of the samples folder: the codec beside it is not served.
        for name in ("..%2Fcodec%2Fconfig.json", "..%252Fcodec%252Fconfig.json", "step-99.wav", "step-8.wav.tmp", ".step-8.wav"):
            answer = client.get(f"/api/runs/{first}/samples/{name}")
            assert answer.status_code == 404 and answer.json()["error"]["code"] in ("sample_not_found", "not_found"), name
        _speaks(home, client, second)
    finally:
        server.stop()


def _speaks(home: Path, client, run_id: int) -> None:
    """The run speaks over HTTP and from the CLI (a child process each); a text run, and chat with this one, are refused."""
    said = client.post(f"/api/runs/{run_id}/speak", json={"text": "one two three", "max_new_tokens": 35})
    assert said.status_code == 200 and said.headers["content-type"] == "audio/wav", said.text
    audio, rate = soundfile.read(io.BytesIO(said.content))
    assert rate == 16000 and 0 < len(audio) <= 5 * 2048  # at most 5 frames of 2048 samples
    with Store(paths.db_path()) as store:
        text_run = store.create_run({"model_name": "demo"}, "demo", "alpaca")
        store.set_modality(text_run, "text")
    refused = client.post(f"/api/runs/{text_run}/speak", json={"text": "one"})
    assert refused.status_code == 409 and "not a text-to-speech one" in refused.json()["error"]["message"]
    assert "speak with it" in client.get(f"/api/runs/{run_id}/chat").json()["error"]["message"]
    audio, rate = soundfile.read(speak_to_file(home, run_id, "--max-new-tokens", "35", "--temperature", "0.8"))
    assert rate == 16000 and 0 < len(audio) <= 5 * 2048


def _export_carries_the_codec(home: Path, run_id: int) -> None:
    dest = export_merged(home, run_id)
    from snac import SNAC

    assert SNAC.from_pretrained(str(dest / "codec")).codebook_size == 64
    assert "SNAC codec" in (dest / "README.md").read_text()
    from tunelab.worker.families import registry as model_family

    assert type(model_family.detect(typed({"model_name": str(dest)}))).__name__ == "TtsFamily"
