"""A vision-language run used as it trained: a real server's `/v1/chat/completions` answers a
chat with an image (an OpenAI `image_url` part, base64 data: URI) from the real inference
child, token for token what the run's processor and weights give here with transformers and
PEFT; bad images are refused naming the part; and `tunelab eval` measures the run's loss on
its held-out image rows (the number training logged) and answers the eval rows' images."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from inference_helpers import Server, run_cli, start_server
from tunelab.demos.assets import DEMO_TRAINING
from tunelab.demos.vision import ensure_vision_demo_assets

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 40
QUESTION = "Describe the image."
MAX_MEDIA = 300_000  # the served limit here, so the size checks need no large bodies


@pytest.fixture(scope="module")
def vision_run(tmp_path_factory) -> dict[str, Any]:
    """A completed vision LoRA run (tiny LLaVA on the shapes data) with an eval split, trained through the CLI."""
    assets = ensure_vision_demo_assets(tmp_path_factory.mktemp("vision") / "assets")
    home = tmp_path_factory.mktemp("vision-serving") / "home"
    home.mkdir()
    config = {"model_name": str(assets.model_dir), "local_datasets": [str(assets.messages)], **DEMO_TRAINING,
              "max_steps": STEPS, "train_on_completions": True, "eval_steps": STEPS, "eval_holdout": 0.1}
    (home.parent / "run.yaml").write_text(yaml.safe_dump(config))
    trained = run_cli(["train", home.parent / "run.yaml"], home, timeout=540)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    run = json.loads(run_cli(["show", 1, "--json"], home).stdout)
    assert run["status"] == "completed" and run["modality"] == "vision", run
    return {"assets": assets, "home": home, "run": run}


@pytest.fixture(scope="module")
def server(vision_run) -> Iterator[Server]:
    served = start_server(vision_run["home"], secrets.token_urlsafe(16), env={"TUNELAB_INFERENCE_MAX_MEDIA_BYTES": str(MAX_MEDIA)})
    yield served
    served.stop()


def image_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def ask(image: Any, text: str = QUESTION) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": text}]}]


def reference_answer(vision_run, image_path: Path, max_new_tokens: int) -> tuple[str, int]:
    """(greedy answer, prompt tokens) of the run's adapter on the base, with the processor it saved."""
    import torch
    from peft import PeftModel
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    output = vision_run["run"]["output_dir"]
    processor = AutoProcessor.from_pretrained(output)
    model = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(vision_run["assets"].model_dir), output).eval()
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    batch = processor(text=[text], images=[[Image.open(image_path).convert("RGB")]], return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(**batch, do_sample=False, max_new_tokens=max_new_tokens, pad_token_id=processor.tokenizer.pad_token_id)
    prompt = batch["input_ids"].shape[1]
    return processor.tokenizer.decode(out[0][prompt:], skip_special_tokens=True), prompt


def test_a_vision_run_answers_a_chat_with_an_image_over_v1(vision_run, server):
    images = sorted((vision_run["assets"].data_dir / "images").glob("*.png"))[:2]
    with server.client() as client:
        models = [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert "run-1" in models and "run-1-base" in models  # a vision run is listed as servable
        for path in images:
            answer = client.post("/v1/chat/completions", json={"model": "run-1", "messages": ask(image_uri(path)),
                                                                "temperature": 0, "max_tokens": 8})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            expected, prompt_tokens = reference_answer(vision_run, path, 8)
            assert body["choices"][0]["message"]["content"] == expected
            # The image's 16 tokens were in the prompt: the picture reached the model.
            assert body["usage"]["prompt_tokens"] == prompt_tokens
        # The same chat streams, and text alone still works on a vision run.
        with client.stream("POST", "/v1/chat/completions", json={"model": "run-1", "messages": ask(image_uri(images[0])),
                                                                  "temperature": 0, "max_tokens": 8, "stream": True}) as streamed:
            chunks = [json.loads(line[6:]) for line in streamed.iter_lines() if line.startswith("data: {")]
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == reference_answer(vision_run, images[0], 8)[0]
        text_only = client.post("/v1/chat/completions", json={"model": "run-1-base", "messages": [{"role": "user", "content": "Hi"}],
                                                               "max_tokens": 2})
        assert text_only.status_code == 200, text_only.text


def test_bad_images_are_refused_naming_the_part(vision_run, server):
    png = (vision_run["assets"].data_dir / "images" / "000.png").read_bytes()
    too_big = "data:image/png;base64," + base64.b64encode(png + bytes(MAX_MEDIA)).decode()
    huge_body = "data:image/png;base64," + base64.b64encode(png + bytes(4 * MAX_MEDIA + (1 << 20))).decode()
    with server.client() as client:
        for url, status, field, says in (
            ("https://example.com/a.png", 400, "messages.0.content.0.image_url.url", "does not fetch image URLs"),
            ("data:image/png;base64,%%%", 400, "messages.0.content.0.image_url.url", "not valid base64"),
            (too_big, 400, "messages.0.content.0.image_url.url", f"larger than {MAX_MEDIA} bytes"),
            (huge_body, 413, "body", "TUNELAB_INFERENCE_MAX_MEDIA_BYTES"),
        ):
            answer = client.post("/v1/chat/completions", json={"model": "run-1", "messages": ask(url), "max_tokens": 2})
            assert answer.status_code == status, answer.text
            error = answer.json()["error"]
            assert error["field"] == field and says in error["message"], error


def test_tunelab_eval_measures_a_vision_runs_loss_and_answers_its_images(vision_run):
    home, run = vision_run["home"], vision_run["run"]
    evaluated = run_cli(["eval", 1, "--json"], home, timeout=540)
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    records = {r["kind"]: r["payload"] for r in json.loads(evaluated.stdout)}
    # The loss on the held-out image rows is the one training logged at its last step.
    logged = [m["eval_loss"] for m in run["metrics"] if m["eval_loss"] is not None]
    assert logged and abs(records["perplexity"]["fine_tune"]["loss"] - logged[-1]) < 1e-3, (records["perplexity"], logged)
    assert records["perplexity"]["base"]["loss"] > records["perplexity"]["fine_tune"]["loss"]
    items = records["generations"]["items"]
    assert items and all(item["reference"].startswith("A ") for item in items)
    for item in items:  # each prompt had its image; the stored item keeps where it was, not its bytes
        parts = item["messages"][-1]["content"]
        assert {"type": "image"} in parts and not any("data" in part for part in parts)
    shown = run_cli(["eval", 1, "--show"], home)
    assert shown.returncode == 0 and "[image]" in shown.stdout, shown.stdout + shown.stderr
