"""A Sesame CSM run through the real orchestrator and worker on a tiny random-init
`CsmForConditionalGeneration` (its random Mimi codec inside), trained whole: CSM's own loss falls,
each eval speaks a sample wav, a stop-and-save then resume reads the Mimi codes back from
the run's codec cache (no clip is encoded again), and the merged export reloads with
AutoProcessor and speaks; `tunelab speak` speaks with the run (its speak child tells CSM from
its config)."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile
from run_helpers import finished, recorded_orchestrator, speak_to_file, stopped_at_step

from typed_config import typed
from tunelab import paths
from tunelab.demos.csm import RATE, csm_demo_config, ensure_csm_demo_assets
from tunelab.export.run import export_run
from tunelab.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
STEPS = 8
RUN_WAIT_S = 400  # well under a minute on two idle cores; a loaded test machine is far slower


def test_csm_learns_speaks_samples_resumes_from_the_codec_cache_and_exports(speech_assets, home, tmp_path):
    assets = ensure_csm_demo_assets(speech_assets.transcripts, tmp_path / "csm")
    with Store(paths.db_path()) as store, recorded_orchestrator(store) as (orchestrator, recorder):
        # 16 clips (one or two held out), evaluated and spoken every 4 steps.
        config = csm_demo_config(assets, speech_assets.transcripts, steps=STEPS, slice_end=16, eval_steps=4, warmup_steps=1)
        first = orchestrator.start(config)
        first_row = stopped_at_step(orchestrator, recorder, first, 5, timeout=RUN_WAIT_S, wait_s=RUN_WAIT_S)
        assert first_row["status"] == "stopped", first_row["error_message"]
        assert first_row["modality"] == "tts"
        second = orchestrator.resume(first)
        row = finished(orchestrator, second, RUN_WAIT_S)
        assert row["status"] == "completed", row["error_message"]
        losses = [m["loss"] for run in (first, second) for m in store.get_metrics(run) if m["loss"] is not None]
        _export_reloads_and_speaks(store, second, tmp_path)
    _speaks_from_the_cli(home, second)

    said = {run: [e["message"] for e in recorder.of_type("status") if e.get("run_id") == run] for run in (first, second)}
    encoded = [m for m in said[first] if m.startswith("Encoded ") and " training clips to codec tokens" in m]
    assert encoded, said[first]
    clips = int(encoded[0].split()[1])
    assert any(m.startswith(f"Reused the codec tokens of {clips} training clips") for m in said[second]), said[second]
    assert not any(m.startswith("Encoded") for m in said[second])  # the resumed run encoded nothing
    assert len(losses) == STEPS and sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, losses
    output = Path(row["output_dir"])
    for step in (4, 8):
        audio, rate = soundfile.read(output / "samples" / f"step-{step}.wav")
        assert rate == RATE and len(audio) > 0


def _export_reloads_and_speaks(store: Store, run_id: int, tmp_path: Path) -> None:
    # The export's own child process merges and saves (the CLI and the server call the same).
    dest = Path(export_run(store, run_id, "merged").plan.dest)
    assert "Sesame CSM" in (dest / "README.md").read_text()
    from transformers import AutoProcessor, CsmForConditionalGeneration, LogitsProcessorList

    from tunelab.worker.families import registry as model_family
    from tunelab.worker.families.csm.trainer import NotEndFirst

    assert type(model_family.detect(typed({"model_name": str(dest)}))).__name__ == "CsmFamily"
    processor = AutoProcessor.from_pretrained(dest)
    model = CsmForConditionalGeneration.from_pretrained(dest).eval()
    # A barely trained model may end its audio at once; the worker's samples forbid that too.
    first_frame = LogitsProcessorList([NotEndFirst(model.config.codebook_eos_token_id)])
    audio = model.generate(**processor("[0]one two three", add_special_tokens=True), output_audio=True, max_new_tokens=6,
                           logits_processor=first_frame)
    processor.save_audio(audio, str(tmp_path / "exported.wav"))
    samples, rate = soundfile.read(tmp_path / "exported.wav")
    assert rate == RATE and len(samples) > 0


def _speaks_from_the_cli(home: Path, run_id: int) -> None:
    audio, rate = soundfile.read(speak_to_file(home, run_id, "--max-new-tokens", "8"))
    assert rate == RATE and len(audio) > 0
