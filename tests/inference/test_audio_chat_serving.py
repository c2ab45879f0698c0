"""An audio chat run used as it trained: a real server's `/v1/chat/completions` answers a chat
with an audio clip (an OpenAI `input_audio` part) from the real inference child, token for
token what the run's processor and weights give here, and `tunelab eval` measures its loss on
the held-out clips (the number training logged) and answers their clips."""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any

import pytest
import yaml
from run_helpers import built_with_espeak

from inference_helpers import run_cli, start_server
from tunelab.demos.audio_chat import QUESTION, ensure_audio_chat_demo_assets
from tunelab.demos.assets import DEMO_TRAINING

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 6


@pytest.fixture(scope="module")
def audio_run(tmp_path_factory) -> dict[str, Any]:
    assets = built_with_espeak(ensure_audio_chat_demo_assets, tmp_path_factory.mktemp("audio-chat") / "assets")
    home = tmp_path_factory.mktemp("audio-serving") / "home"
    home.mkdir()
    config = {"model_name": str(assets.model_dir), "local_datasets": [str(assets.messages)], **DEMO_TRAINING,
              "max_steps": STEPS, "train_on_completions": True, "eval_steps": STEPS, "eval_holdout": 0.25}
    (home.parent / "run.yaml").write_text(yaml.safe_dump(config))
    trained = run_cli(["train", home.parent / "run.yaml"], home, timeout=540)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    run = json.loads(run_cli(["show", 1, "--json"], home).stdout)
    assert run["status"] == "completed" and run["modality"] == "audio_chat", run
    return {"assets": assets, "home": home, "run": run}


def reference_answer(audio_run, clip_path, max_new_tokens: int) -> tuple[str, int]:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForMultimodalLM, AutoProcessor

    from tunelab.worker.families.speech.collator import decode_clip

    output = audio_run["run"]["output_dir"]
    processor = AutoProcessor.from_pretrained(output)
    model = PeftModel.from_pretrained(AutoModelForMultimodalLM.from_pretrained(audio_run["assets"].model_dir), output).eval()
    rate = int(processor.feature_extractor.sampling_rate)
    messages = [{"role": "user", "content": [{"type": "audio"}, {"type": "text", "text": QUESTION}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    batch = processor(text=[text], audio=[decode_clip({"path": str(clip_path), "bytes": None}, rate)], sampling_rate=rate,
                      return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=processor.tokenizer.pad_token_id)
    prompt = batch["input_ids"].shape[1]
    return processor.tokenizer.decode(out[0][prompt:], skip_special_tokens=True), prompt


def test_an_audio_chat_run_answers_a_clip_over_v1_and_is_evaluated(audio_run):
    clip = audio_run["assets"].data_dir / "clips" / "000.wav"
    server = start_server(audio_run["home"], secrets.token_urlsafe(16))
    try:
        with server.client() as client:
            part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip.read_bytes()).decode(), "format": "wav"}}
            body = {"model": "run-1", "temperature": 0, "max_tokens": 6,
                    "messages": [{"role": "user", "content": [part, {"type": "text", "text": QUESTION}]}]}
            answer = client.post("/v1/chat/completions", json=body)
            assert answer.status_code == 200, answer.text
            expected, prompt_tokens = reference_answer(audio_run, clip, 6)
            assert answer.json()["choices"][0]["message"]["content"] == expected
            assert answer.json()["usage"]["prompt_tokens"] == prompt_tokens  # the clip's audio tokens were in the prompt
            # An image to an audio chat run is refused, saying what the run takes.
            image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n0").decode()}}
            refused = client.post("/v1/chat/completions", json={**body, "messages": [{"role": "user", "content": [image]}]})
            assert refused.status_code == 400 and "cannot take image input" in refused.json()["error"]["message"], refused.text
    finally:
        server.stop()
    evaluated = run_cli(["eval", 1, "--json", "--max-prompts", 2, "--max-new-tokens", 4], audio_run["home"], timeout=540)
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    records = {r["kind"]: r["payload"] for r in json.loads(evaluated.stdout)}
    logged = [m["eval_loss"] for m in audio_run["run"]["metrics"] if m["eval_loss"] is not None]
    assert logged and abs(records["perplexity"]["fine_tune"]["loss"] - logged[-1]) < 1e-3, (records["perplexity"], logged)
    items = records["generations"]["items"]
    assert len(items) == 2 and all({"type": "audio"} in item["messages"][-1]["content"] for item in items)
