"""The page's Chat, Compare with base, Export and Model picker, against a real server that
holds one finished demo LoRA run (trained once for the module through the CLI) and a
fake Hugging Face cache in its HOME. Answers are checked against the same request sent
to the OpenAI-style route directly; Stop is checked on the server's side (the
generation ends "cancelled", well short of its token budget)."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import yaml
from playwright.sync_api import expect

# The first test's setup trains the run and loads it for inference; on a busy 2-core machine
# that alone has taken over 250 s, so the hang guard is 600 s as in the other training modules.
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

LOAD_MS = 120_000  # the first answer waits for the inference child to load the model
STOP_BOUND_S = 60  # a stopped answer ends at its next token; this is only a hang guard
HF_ENV = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


class ChatServer:
    def __init__(self, process: subprocess.Popen, url: str, token: str, home: Path):
        self.process, self.url, self.token, self.home = process, url, token, home

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = httpx.request(method, self.url.rstrip("/") + path, headers={"Authorization": f"Bearer {self.token}"},
                                 timeout=300, **kwargs)
        assert response.status_code < 400, f"{method} {path} -> {response.status_code} {response.text}"
        return response.json()

    def answer(self, model: str, messages: list[dict[str, str]], max_tokens: int) -> str:
        body = {"model": model, "messages": messages, "temperature": 0, "top_p": 1, "max_tokens": max_tokens}
        return self.json("POST", "/v1/chat/completions", json=body)["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def server(tmp_path_factory, demo_assets) -> Iterator[ChatServer]:
    """A server whose history holds run 1, a finished two-step LoRA run on the demo model
    (with checkpoints at steps 1 and 2), and whose HOME holds a Hugging Face cache with one model in it."""
    base = tmp_path_factory.mktemp("chat-page")
    home, user_home = base / "tunelab", base / "user"
    snapshot = user_home / ".cache" / "huggingface" / "hub" / "models--acme--tiny-chat" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    env = {k: v for k, v in os.environ.items() if k not in HF_ENV and k != "TUNELAB_TOKEN"}
    env.update(TUNELAB_HOME=str(home), HOME=str(user_home), TUNELAB_DATA_ROOTS=str(demo_assets.root), PYTHONUNBUFFERED="1")
    config = {"model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)], "max_steps": 2,
              "save_steps": 1, "max_seq_length": 96, "batch_size": 2, "gradient_accumulation_steps": 1, "learning_rate": 1e-2,
              "lora_r": 8, "lora_alpha": 16}
    (base / "run.yaml").write_text(yaml.safe_dump(config))
    trained = subprocess.run([sys.executable, "-m", "tunelab.cli.main", "train", str(base / "run.yaml")], env=env,
                             capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stdout + trained.stderr
    token = secrets.token_urlsafe(24)
    log = open(base / "server.log", "w")
    process = subprocess.Popen([sys.executable, "-m", "tunelab.server", "--port", "0", "--log-level", "warning"],
                               # no prewarmed training worker: this server only chats
                               env={**env, "TUNELAB_TOKEN": token, "TUNELAB_PREWARM": "0"}, stdout=subprocess.PIPE,
                               stderr=log, text=True)
    try:
        match = re.search(r"(http://127\.0\.0\.1:\d+/)", process.stdout.readline())
        assert match, f"the server announced no address; its log:\n{(base / 'server.log').read_text()}"
        chat_server = ChatServer(process, match.group(1), token, home)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(chat_server.url + "api/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server never answered /api/health"
            time.sleep(0.1)
        run = chat_server.json("GET", "/api/runs/1")
        assert run["status"] == "completed", run
        # Load the model in the inference child now, so each test's first answer does not wait on it.
        assert chat_server.answer("run-1", [{"role": "user", "content": "Hi"}], 1) is not None
        yield chat_server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def inference_status(server: ChatServer) -> dict[str, Any]:
    return server.json("GET", "/api/inference")


def wait_until_ended(server: ChatServer, finished_before: int) -> dict[str, Any]:
    deadline = time.monotonic() + STOP_BOUND_S
    while time.monotonic() < deadline:
        status = inference_status(server)
        if status["generating"] == 0 and status["finished"] > finished_before:
            return status["recent"][-1]
        time.sleep(0.2)
    raise AssertionError(f"the answer was still being generated {STOP_BOUND_S} s after Stop: {status}")


def settings(page, temperature: str, max_tokens: str, system: str = "") -> None:
    page.get_by_label("System prompt", exact=True).fill(system)
    page.get_by_label("Temperature", exact=True).fill(temperature)
    page.get_by_label("Top-p", exact=True).fill("1")
    page.get_by_label("Max new tokens", exact=True).fill(max_tokens)


def send(page, text: str) -> None:
    page.get_by_label("Message", exact=True).fill(text)
    page.get_by_role("button", name="Send").click()


def test_the_model_picker_offers_the_demo_and_the_hugging_face_cache(server, open_page, demo_assets):
    page = open_page()
    options = page.locator("#local-models option")
    expect(page.locator(f'#local-models option[value="{demo_assets.model_dir}"]')).to_have_attribute("data-kind", "demo")
    expect(page.locator('#local-models option[value="acme/tiny-chat"]')).to_have_attribute("data-kind", "hf_cache")
    assert page.get_by_label("Model", exact=True).get_attribute("list") == "local-models"
    values = options.evaluate_all("(nodes) => nodes.map((n) => n.value)")
    # Nothing from outside the data roots is named: the cache by hub id only.
    assert not [v for v in values if str(server.home.parent / "user") in v], values
    expect(page.locator("#model-picker-note")).to_contain_text("on this machine")
    # Typing still works: any hub id stays in the box.
    page.get_by_label("Model", exact=True).fill("someone/elsewhere")
    expect(page.get_by_label("Model", exact=True)).to_have_value("someone/elsewhere")


def test_chat_streams_the_runs_answers_and_stop_stops_the_generation(server, open_page, shoot):
    page = open_page()
    page.locator('#runs-list li[data-run-id="1"]').get_by_role("button", name="Chat with Run #1").click()
    expect(page.locator("#playground")).to_be_visible()
    expect(page.locator("#chat-template-source")).to_contain_text("saved with its tokenizer")
    expect(page.locator("#chat-template")).to_contain_text("<|assistant|>")

    # A short greedy answer, with a system prompt: the same as the route gives directly.
    settings(page, temperature="0", max_tokens="12", system="Answer briefly.")
    send(page, "What is 2 + 3?")
    reply = page.locator("#chat-log-tuned .chat-turn.assistant").last
    expect(reply).not_to_have_attribute("data-state", "streaming", timeout=LOAD_MS)
    expected = server.answer("run-1", [{"role": "system", "content": "Answer briefly."},
                                       {"role": "user", "content": "What is 2 + 3?"}], 12)
    assert reply.locator(".chat-text").text_content() == expected

    # A long answer (no early end token): text arrives while it is still streaming; Stop ends it on the server.
    page.route("**/v1/chat/completions", lambda route: route.continue_(
        post_data=json.dumps({**json.loads(route.request.post_data), "min_tokens": 4000})))
    settings(page, temperature="1", max_tokens="4000")
    before = inference_status(server)["finished"]
    send(page, "Tell me a long story.")
    reply = page.locator("#chat-log-tuned .chat-turn.assistant").last
    page.wait_for_function("""() => {
        const turns = document.querySelectorAll('#chat-log-tuned .chat-turn.assistant');
        const last = turns[turns.length - 1];
        return last.dataset.state === 'streaming' && last.querySelector('.chat-text').textContent.length > 20;
    }""", timeout=LOAD_MS)
    shoot(page, "chat-streaming")
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(reply).to_have_attribute("data-state", "stopped")
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    ended = wait_until_ended(server, before)
    assert ended["model"] == "run-1" and ended["finish_reason"] == "cancelled", ended
    assert ended["completion_tokens"] < 4000, ended


def test_compare_shows_the_base_and_the_fine_tune_side_by_side(server, open_page, shoot):
    page = open_page()
    page.locator('#runs-list li[data-run-id="1"]').get_by_role("button", name="Compare Run #1 with its base").click()
    expect(page.locator("#chat-side-base")).to_be_visible()
    expect(page.locator("#chat-about")).to_contain_text("adapter switched off")
    settings(page, temperature="0", max_tokens="10")
    send(page, "Name a colour.")
    answers = {}
    for side in ("base", "tuned"):
        reply = page.locator(f"#chat-log-{side} .chat-turn.assistant").last
        expect(reply).not_to_have_attribute("data-state", "streaming", timeout=LOAD_MS)
        assert reply.get_attribute("data-state") in ("done", "length")
        answers[side] = reply.locator(".chat-text").text_content()
    shoot(page, "chat-compare")
    question = [{"role": "user", "content": "Name a colour."}]
    assert answers["base"] == server.answer("run-1-base", question, 10)
    assert answers["tuned"] == server.answer("run-1", question, 10)


def test_export_offers_the_servers_formats_and_writes_the_adapter(server, open_page):
    formats = httpx.get(server.url + "openapi.json").json()["components"]["schemas"]["ExportRequest"]["properties"]["format"]
    page = open_page()
    page.locator('#runs-list li[data-run-id="1"]').get_by_role("button", name="Export Run #1").click()
    dialog = page.get_by_role("dialog", name="Export Run #1")
    expect(dialog).to_be_visible()
    offered = dialog.get_by_label("Format").locator("option").evaluate_all("(nodes) => nodes.map((n) => n.value)")
    assert [v for v in offered if v] == formats["enum"]
    dialog.get_by_label("Format").select_option("adapter")
    dialog.get_by_role("button", name="Export").click()
    expect(dialog.locator(".export-done")).to_contain_text("Exported adapter", timeout=LOAD_MS)
    run = server.json("GET", "/api/runs/1")
    dest = Path(run["output_dir"]) / "export-adapter"
    assert (dest / "adapter_model.safetensors").is_file()
    expect(dialog.locator(".export-files")).to_contain_text("adapter_model.safetensors")


def test_a_checkpoint_can_answer_instead_of_the_final_weights(server, open_page):
    page = open_page()
    page.locator('#runs-list li[data-run-id="1"]').get_by_role("button", name="Chat with Run #1").click()
    weights = page.get_by_label("Weights")
    # The options arrive with the chat target (a fetch after the click): wait for them.
    expect(weights.locator("option")).to_have_text(["final weights", "checkpoint 1", "checkpoint 2"])
    weights.select_option(label="checkpoint 1")
    expect(page.locator("#chat-about")).to_contain_text("run-1-checkpoint-1 (its checkpoint at step 1)")
    settings(page, temperature="0", max_tokens="6")
    send(page, "Hello")
    reply = page.locator("#chat-log-tuned .chat-turn.assistant").last
    expect(reply).not_to_have_attribute("data-state", "streaming", timeout=LOAD_MS)
    assert reply.locator(".chat-text").text_content() == server.answer("run-1-checkpoint-1", [{"role": "user", "content": "Hello"}], 6)


def test_a_text_to_speech_run_offers_speak_in_place_of_chat(server, open_page):
    """The history's Speak action posts the text and shows the server's reason when it cannot
    speak (here: the run's folder is gone); the real synthesis is tests/speech/test_tts_run.py's."""
    from tunelab.store import Store

    with Store(server.home / "tunelab.db") as store:
        run_id = store.create_run({"model_name": "tiny-tts"}, "tiny-tts", "transcription")
        store.set_modality(run_id, "tts")
        store.finalize_run(run_id, status="completed", final_step=2, output_dir=server.home / "gone")
    page = open_page()
    item = page.locator(f'#runs-list li[data-run-id="{run_id}"]')
    expect(item.get_by_role("button", name=f"Speak with Run #{run_id}")).to_be_visible()
    assert item.get_by_role("button", name=f"Chat with Run #{run_id}").count() == 0
    item.get_by_role("button", name=f"Speak with Run #{run_id}").click()
    item.get_by_label(f"Text for Run #{run_id} to speak").fill("one two three")
    item.get_by_role("button", name="Speak", exact=True).click()
    expect(item.locator(".run-speak .run-error-line")).to_contain_text("no longer exists")
    expect(item.get_by_label(f"Speech of Run #{run_id}")).to_be_hidden()
