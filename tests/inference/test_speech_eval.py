"""A speech-to-text run evaluated with its family's own metric: `tunelab eval` transcribes every
eval clip with the base and with the fine-tune and reports each side's word error rate
against the clips' transcripts, beside the loss on those clips (the number training logged);
chat, which a speech model cannot hold, is refused saying to evaluate it instead."""

from __future__ import annotations

import json
from typing import Any

import jiwer
import pytest
import yaml
from run_helpers import built_with_espeak

from inference_helpers import run_cli
from tunelab.demos.speech import SPEECH_DEMO_TRAINING, ensure_speech_demo_assets

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 3


@pytest.fixture(scope="module")
def speech_run(tmp_path_factory) -> dict[str, Any]:
    assets = built_with_espeak(ensure_speech_demo_assets, tmp_path_factory.mktemp("speech") / "assets")
    home = tmp_path_factory.mktemp("speech-eval") / "home"
    home.mkdir()
    config = {"model_name": str(assets.model_dir), "local_datasets": [str(assets.transcripts)],
              "local_eval_datasets": [str(assets.scored)], **SPEECH_DEMO_TRAINING, "training_type": "lora",
              "learning_rate": 3e-3, "batch_size": 4, "max_steps": STEPS, "eval_steps": STEPS}
    (home.parent / "run.yaml").write_text(yaml.safe_dump(config))
    trained = run_cli(["train", home.parent / "run.yaml"], home, timeout=540)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    run = json.loads(run_cli(["show", 1, "--json"], home).stdout)
    assert run["status"] == "completed" and run["modality"] == "speech", run
    return {"assets": assets, "home": home, "run": run}


def test_tunelab_eval_reports_word_error_rate_for_a_speech_run(speech_run):
    home, run = speech_run["home"], speech_run["run"]
    evaluated = run_cli(["eval", 1, "--json", "--max-prompts", 50], home, timeout=540)
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    records = {r["kind"]: r["payload"] for r in json.loads(evaluated.stdout)}
    logged = [m["eval_loss"] for m in run["metrics"] if m["eval_loss"] is not None]
    assert logged and abs(records["perplexity"]["fine_tune"]["loss"] - logged[-1]) < 1e-3, (records["perplexity"], logged)

    transcripts = [json.loads(line)["text"] for line in speech_run["assets"].scored.read_text().splitlines()]
    payload = records["generations"]
    items = payload["items"]
    assert payload["rows"] == len(items) == len(transcripts)
    assert [item["reference"] for item in items] == transcripts  # every eval clip, scored against its own transcript
    for side in ("base", "fine_tune"):
        heard = [item[side]["text"] for item in items]
        assert payload["wer"][side] == pytest.approx(jiwer.wer(transcripts, heard))
    shown = run_cli(["eval", 1, "--show"], home)
    assert "word error rate" in shown.stdout, shown.stdout + shown.stderr


def test_chat_with_a_speech_run_says_to_evaluate_it(speech_run):
    refused = run_cli(["chat", 1], speech_run["home"], stdin="hello\n")
    assert refused.returncode == 1
    assert "speech-to-text" in refused.stderr + refused.stdout and "tunelab eval 1" in refused.stderr + refused.stdout
