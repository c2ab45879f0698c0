"""The OpenAI-compatible endpoints through a real server on a loopback port, called with
the official `openai` client: models, chat and completions, streamed and not, the base
model for comparison, refusals in OpenAI's error shape, and a client that goes away."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from inference_helpers import start_server

pytestmark = pytest.mark.slow

TOKEN = "inference-test-token"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# Far longer than any test waits for: an answer that ends is one that was stopped.
ENDLESS = {"max_tokens": 2000, "extra_body": {"min_tokens": 2000}}
# How long a stopped answer may take to be recorded as ended (it ends at its next token).
STOP_BOUND_S = 60


@pytest.fixture(scope="module")
def server(trained):
    running = start_server(trained.home, TOKEN)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=TOKEN, max_retries=0, timeout=300)


def test_models_lists_the_run_and_its_base(client, trained):
    assert [m.id for m in client.models.list()] == [f"run-{trained.run_id}", f"run-{trained.run_id}-base"]


def test_chat_completion_is_the_fine_tunes_greedy_answer(client, trained, reference):
    answer = client.chat.completions.create(model=f"run-{trained.run_id}", messages=QUESTION, temperature=0, max_tokens=10)
    assert answer.object == "chat.completion"
    assert answer.choices[0].message.role == "assistant"
    assert answer.choices[0].message.content == reference.chat(QUESTION, 10)
    assert answer.choices[0].finish_reason in ("stop", "length")
    assert answer.usage.prompt_tokens == reference.chat_prompt_tokens(QUESTION)
    assert 1 <= answer.usage.completion_tokens <= 10


def test_streamed_chat_matches_the_whole_answer(client, trained, reference):
    chunks = list(client.chat.completions.create(model=f"run-{trained.run_id}", messages=QUESTION, temperature=0,
                                                 max_tokens=10, stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) >= 2  # streamed in pieces, not sent at once
    assert "".join(pieces) == reference.chat(QUESTION, 10)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].usage.completion_tokens >= len(pieces)


def test_the_base_model_answers_as_the_base(client, trained, reference):
    base = client.chat.completions.create(model=f"run-{trained.run_id}-base", messages=QUESTION, temperature=0, max_tokens=10)
    assert base.choices[0].message.content == reference.chat(QUESTION, 10, adapter=False)
    assert base.choices[0].message.content != reference.chat(QUESTION, 10)


def test_completions_continue_the_prompt_streamed_and_not(client, trained, reference):
    prompt, model = "The capital of Japan is", f"run-{trained.run_id}"
    whole = client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=8)
    assert whole.object == "text_completion"
    assert whole.choices[0].text == reference.complete(prompt, 8)
    streamed = "".join(c.choices[0].text for c in client.completions.create(model=model, prompt=prompt, temperature=0,
                                                                           max_tokens=8, stream=True))
    assert streamed == whole.choices[0].text
    base = client.completions.create(model=model + "-base", prompt=prompt, temperature=0, max_tokens=8)
    assert base.choices[0].text == reference.complete(prompt, 8, adapter=False)


def test_a_stop_string_ends_the_answer_before_it(client, trained, reference):
    prompt, model = "The capital of Japan is", f"run-{trained.run_id}-base"
    full = reference.complete(prompt, 12, adapter=False)
    assert len(full.strip()) >= 4, full
    stop = full.strip()[2:4]
    cut = client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=12, stop=[stop])
    assert cut.choices[0].text == full[:full.find(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_sampling_with_a_seed_repeats(client, trained):
    ask = {"model": f"run-{trained.run_id}-base", "prompt": "Name a colour:", "temperature": 1.5, "top_p": 0.9,
           "max_tokens": 12, "seed": 7}
    assert client.completions.create(**ask).choices[0].text == client.completions.create(**ask).choices[0].text


@pytest.mark.parametrize("ask, param", [
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 100_000}, "max_tokens"),
    ({"n": 3}, "n"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
])
def test_bad_fields_are_refused_by_name(client, trained, ask, param):
    request = {"model": f"run-{trained.run_id}", "messages": QUESTION, **ask}
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(**request)
    error = refused.value.body
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert param.split(".")[0] in error["message"]


def test_an_unknown_model_is_404_naming_the_available_ones(client, trained):
    for name in ("gpt-4o", "run-999", f"run-{trained.run_id}-checkpoint-3"):
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(model=name, messages=QUESTION)
        assert missing.value.body["code"] == "model_not_found"
        assert f"run-{trained.run_id}-base" in missing.value.body["message"]


def test_the_token_is_required(server):
    stranger = openai.OpenAI(base_url=server.base_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    assert httpx.post(server.base_url + "/v1/completions", json={"model": "run-1", "prompt": "x"}).status_code == 401


def _finished(server) -> int:
    with server.client() as http:
        return http.get("/api/inference").json()["finished"]


def _wait_for_the_end(server, finished_before: int) -> dict:
    """How the next answer after `finished_before` ended, once nothing is generating."""
    deadline = time.monotonic() + STOP_BOUND_S
    with server.client() as http:
        while time.monotonic() < deadline:
            status = http.get("/api/inference").json()
            if status["generating"] == 0 and status["finished"] > finished_before:
                return status["recent"][-1]
            time.sleep(0.2)
    raise AssertionError(f"the answer was still being generated {STOP_BOUND_S} s after its client left")


def test_a_streaming_client_that_disconnects_stops_its_answer(server, trained):
    body = {"model": f"run-{trained.run_id}", "prompt": "Once upon a time", "temperature": 0, "stream": True,
            "max_tokens": ENDLESS["max_tokens"], **ENDLESS["extra_body"]}
    before = _finished(server)
    with server.client() as http, http.stream("POST", "/v1/completions", json=body) as response:
        assert response.status_code == 200
        first = next(line for line in response.iter_lines() if line.startswith("data: "))
        assert '"text_completion"' in first
    ended = _wait_for_the_end(server, before)
    assert ended["finish_reason"] == "cancelled"
    assert ended["completion_tokens"] < ENDLESS["max_tokens"]


def test_a_waiting_client_that_gives_up_stops_its_answer(server, trained, client):
    body = {"model": f"run-{trained.run_id}", "messages": QUESTION, "temperature": 0,
            "max_tokens": ENDLESS["max_tokens"], **ENDLESS["extra_body"]}
    before = _finished(server)
    with pytest.raises(httpx.ReadTimeout), httpx.Client(base_url=server.base_url, timeout=httpx.Timeout(300, read=3),
                                                        headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        http.post("/v1/chat/completions", json=body)
    ended = _wait_for_the_end(server, before)
    assert ended["finish_reason"] == "cancelled" and ended["completion_tokens"] < ENDLESS["max_tokens"]
    # The model is free again: the next request is answered.
    assert client.chat.completions.create(model=f"run-{trained.run_id}", messages=QUESTION, max_tokens=2).choices


def test_the_server_itself_never_loaded_torch(server, client, trained):
    client.completions.create(model=f"run-{trained.run_id}", prompt="Hi", max_tokens=1)
    with server.client() as http:
        assert http.get("/api/health", params={"detail": 1}).json()["heavy_modules"] == []
