"""The page with a vision-language run: Chat offers an image to attach, the image goes with the
message, and the answer is the one `/v1/chat/completions` gives for the same image; Evaluate
measures the run's loss on its held-out image rows. Against a real server holding one short
vision LoRA run on the tiny LLaVA (trained once for the module through the CLI). A run of a
family that cannot chat says why on its row."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml
from playwright.sync_api import expect

from conftest import _read_url, _wait_healthy
from tunelab.demos.assets import DEMO_TRAINING
from tunelab.demos.vision import ensure_vision_demo_assets

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]
LOAD_MS = 120_000  # the first answer waits for the inference child to load the model
QUESTION = "Describe the image."


class VisionServer:
    def __init__(self, process: subprocess.Popen, url: str, token: str, image: Path, home: Path):
        self.process, self.url, self.token, self.image, self.home = process, url, token, image, home

    def answer(self, max_tokens: int) -> str:
        uri = "data:image/png;base64," + base64.b64encode(self.image.read_bytes()).decode()
        body = {"model": "run-1", "temperature": 0, "top_p": 1, "max_tokens": max_tokens,
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": uri}},
                                                          {"type": "text", "text": QUESTION}]}]}
        response = httpx.post(self.url + "v1/chat/completions", json=body, headers={"Authorization": f"Bearer {self.token}"}, timeout=300)
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[VisionServer]:
    base = tmp_path_factory.mktemp("vision-page")
    assets = ensure_vision_demo_assets(base / "assets")
    home = base / "tunelab"
    env = {**{k: v for k, v in os.environ.items() if k != "TUNELAB_TOKEN"}, "TUNELAB_HOME": str(home), "PYTHONUNBUFFERED": "1",
           "TUNELAB_DATA_ROOTS": str(assets.root)}  # the page's evaluation reads the images there
    config = {"model_name": str(assets.model_dir), "local_datasets": [str(assets.messages)], **DEMO_TRAINING, "max_steps": 10,
              "train_on_completions": True, "eval_steps": 10, "eval_holdout": 0.1}
    (base / "run.yaml").write_text(yaml.safe_dump(config))
    trained = subprocess.run([sys.executable, "-m", "tunelab.cli.main", "train", str(base / "run.yaml")], env=env,
                             capture_output=True, text=True, timeout=540)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    token = secrets.token_urlsafe(24)
    log = open(base / "server.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "tunelab.server", "--port", "0", "--log-level", "warning"],
                               env={**env, "TUNELAB_TOKEN": token, "TUNELAB_PREWARM": "0"}, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        url = _read_url(process, base / "server.log")
        _wait_healthy(url)
        served = VisionServer(process, url, token, assets.data_dir / "images" / "003.png", home)
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_chat_with_a_vision_run_sends_an_attached_image(server, open_page, shoot):
    page = open_page()
    row = page.locator('#runs-list li[data-run-id="1"]')
    expect(row.locator(".run-facts")).to_contain_text("vision")
    row.get_by_role("button", name="Chat with Run #1").click()
    expect(page.locator("#playground")).to_be_visible()
    expect(page.get_by_label("Image", exact=True)).to_be_visible()
    page.get_by_label("Temperature", exact=True).fill("0")
    page.get_by_label("Top-p", exact=True).fill("1")
    page.get_by_label("Max new tokens", exact=True).fill("8")
    page.get_by_label("Image", exact=True).set_input_files(str(server.image))
    page.get_by_label("Message", exact=True).fill(QUESTION)
    page.get_by_role("button", name="Send").click()
    reply = page.locator("#chat-log-tuned .chat-turn.assistant").last
    expect(reply).not_to_have_attribute("data-state", "streaming", timeout=LOAD_MS)
    assert reply.get_attribute("data-state") in ("done", "length"), reply.text_content()
    # The image went with the message: the answer is the route's own for that image.
    assert reply.locator(".chat-text").text_content() == server.answer(8)
    expect(page.locator("#chat-log-tuned .chat-turn.user img.chat-media")).to_have_count(1)
    expect(page.get_by_label("Image", exact=True)).to_have_value("")  # one image per message
    shoot(page, "chat-vision")


def test_evaluate_on_the_page_measures_a_vision_runs_loss(server, open_page):
    page = open_page()
    row = page.locator('#runs-list li[data-run-id="1"]')
    row.get_by_role("button", name="Evaluate Run #1").click()
    table = row.locator('section.eval-record[data-kind="perplexity"]')
    expect(table).to_be_visible(timeout=LOAD_MS * 2)
    expect(table).to_contain_text("Fine-tune")
    expect(row.locator('section.eval-record[data-kind="generations"]')).to_contain_text("[image]")


def test_a_run_whose_family_cannot_chat_says_why_on_its_row(server, open_page, tmp_path):
    """Runs of the families without a chat (recorded here as finished runs of those modalities)
    keep their row's actions and say why Chat is not among them."""
    from tunelab.store import Store

    with Store(server.home / "tunelab.db") as store:
        ids = {}
        for modality in ("speech", "embedding"):
            ids[modality] = store.create_run({"model_name": "base-model"}, "base-model", "data")
            store.finalize_run(ids[modality], status="completed", output_dir=str(tmp_path))
            store.set_modality(ids[modality], modality)
    page = open_page()
    speech = page.locator(f'#runs-list li[data-run-id="{ids["speech"]}"]')
    expect(speech.locator(".run-use-note")).to_contain_text("transcribes audio")
    expect(speech.get_by_role("button", name=f"Evaluate Run #{ids['speech']}")).to_be_visible()  # its word error rate
    embedding = page.locator(f'#runs-list li[data-run-id="{ids["embedding"]}"]')
    expect(embedding.locator(".run-use-note").first).to_contain_text("answers with vectors")
    for row, run_id in ((speech, ids["speech"]), (embedding, ids["embedding"])):
        expect(row.get_by_role("button", name=f"Chat with Run #{run_id}")).to_have_count(0)
        expect(row.get_by_role("button", name=f"Export Run #{run_id}")).to_be_visible()
    expect(embedding.get_by_role("button", name=f"Evaluate Run #{ids['embedding']}")).to_have_count(0)
