"""`tunelab eval` and the eval API on the shared LoRA run (real eval child, real server):
loss on the eval split for base and fine-tune, generations stored and returned, lm-eval on
a local task (or the message saying how to install it), and the clear refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from inference_helpers import run_cli, start_server
from tunelab.store.evals import list_evals
from tunelab.evaluate.runner import EvalInputError, EvalOptions, build_request, lm_eval_installed
from tunelab.store import Store

TOKEN = "eval-test-token"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def server(trained):
    server = start_server(trained.home, TOKEN)
    yield server
    server.stop()


def _records(stdout: str) -> dict[str, dict]:
    return {record["kind"]: record for record in json.loads(stdout)}


def test_cli_measures_base_and_fine_tune_on_the_eval_split_and_stores_it(trained, reference):
    done = run_cli(["eval", trained.run_id, "--max-prompts", 2, "--max-new-tokens", 6, "--json"], trained.home)
    assert done.returncode == 0, done.stderr
    records = _records(done.stdout)
    ppl = records["perplexity"]["payload"]
    with Store(trained.home / "tunelab.db") as store:
        logged = [row["eval_loss"] for row in store.get_metrics(trained.run_id) if row["eval_loss"] is not None]
        stored = {record["id"] for record in list_evals(store, trained.run_id)}
    # The training's own eval at its last step measured these weights on these rows.
    assert ppl["fine_tune"]["loss"] == pytest.approx(logged[-1], rel=1e-4)
    assert ppl["fine_tune"]["loss"] < ppl["base"]["loss"]
    assert ppl["fine_tune"]["perplexity"] == pytest.approx(math.exp(ppl["fine_tune"]["loss"]))
    assert ppl["rows"] == 16 and ppl["tokens"] > 0 and ppl["step"] is None
    items = records["generations"]["payload"]["items"]
    assert len(items) == 2 and records["generations"]["payload"]["source"] == "eval split"
    for item in items:
        assert item["messages"][-1]["role"] == "user" and item["reference"]
        assert item["fine_tune"]["text"] == reference.chat(item["messages"], 6)
        assert item["base"]["text"] == reference.chat(item["messages"], 6, adapter=False)
    assert {records["perplexity"]["id"], records["generations"]["id"]} <= stored

    shown = run_cli(["eval", trained.run_id, "--show"], trained.home)
    assert shown.returncode == 0, shown.stderr
    assert f"loss {ppl['base']['loss']:.4f}" in shown.stdout and f"loss {ppl['fine_tune']['loss']:.4f}" in shown.stdout
    assert "fine-tune:" in shown.stdout and "reference:" in shown.stdout


def test_api_evaluates_a_prompts_file_and_returns_the_answers(trained, reference, server):
    prompts = trained.home / "datasets" / "prompts.jsonl"
    prompts.parent.mkdir(exist_ok=True)
    questions = ["Add the two numbers.\n\n2 and 3", {"messages": [{"role": "user", "content": "Name the colour.\n\nIt is blue."}],
                                                    "reference": "You gave me blue."}]
    prompts.write_text("".join(json.dumps(q) + "\n" for q in questions))
    with server.client() as client:
        answer = client.post(f"/api/runs/{trained.run_id}/eval",
                             json={"perplexity": False, "prompts_file": "prompts.jsonl", "max_new_tokens": 5})
        assert answer.status_code == 200, answer.text
        [posted] = answer.json()["evals"]
        listed = client.get(f"/api/runs/{trained.run_id}/evals").json()
        outside = client.post(f"/api/runs/{trained.run_id}/eval", json={"perplexity": False, "prompts_file": "/etc/hosts"})
        missing = client.post("/api/runs/999/eval", json={})
        unknown = client.get("/api/runs/999/evals")
        empty = client.post(f"/api/runs/{trained.run_id}/eval", json={"perplexity": False, "generations": False})
    assert posted["kind"] == "generations" and posted["payload"]["source"] == str(prompts.resolve())
    assert listed["evals"][0] == posted and listed["running"] is False
    first, second = posted["payload"]["items"]
    asked = [{"role": "user", "content": questions[0]}], questions[1]["messages"]
    assert first["messages"] == asked[0] and second["reference"] == "You gave me blue."
    for item, messages in zip((first, second), asked):
        assert item["fine_tune"]["text"] == reference.chat(messages, 5)
        assert item["base"]["text"] == reference.chat(messages, 5, adapter=False)
    assert outside.status_code == 422 and outside.json()["error"]["field"] == "prompts_file"
    assert "outside the folders tunelab may read" in outside.json()["error"]["message"]
    assert missing.status_code == 404 and "there is no run 999" in missing.json()["error"]["message"]
    assert unknown.status_code == 404
    assert empty.status_code == 422 and "nothing to evaluate" in empty.json()["error"]["message"]


@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"the page test needs Chromium at {CHROMIUM}")
def test_the_history_evaluates_a_run_and_shows_base_and_fine_tune_side_by_side(trained, server):
    from playwright.sync_api import expect, sync_playwright

    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(300_000)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{server.base_url}/#token={TOKEN}")
            row = page.locator(f'li.run[data-run-id="{trained.run_id}"]')
            row.get_by_role("button", name="Evaluate").click()
            evals = row.locator("details.run-evals")
            expect(evals).to_have_attribute("open", "", timeout=300_000)  # the evaluation runs first
            perplexity = evals.locator('section.eval-record[data-kind="perplexity"]').first
            expect(perplexity).to_contain_text("Fine-tune", timeout=60_000)
            expect(perplexity).to_contain_text("Base")
            generations = evals.locator('section.eval-record[data-kind="generations"]').first
            expect(generations).to_contain_text("from eval split")
            expect(generations.locator(".eval-sides").first.locator("h4")).to_have_text(["Base", "Fine-tune", "Reference"])
            shown = perplexity.inner_text()
        finally:
            browser.close()
    assert not errors, errors
    with server.client() as client:
        newest = client.get(f"/api/runs/{trained.run_id}/evals").json()["evals"][:2]
    assert [record["kind"] for record in newest] == ["generations", "perplexity"]
    losses = newest[1]["payload"]["base"]["loss"], newest[1]["payload"]["fine_tune"]["loss"]
    assert losses[1] < losses[0]
    for loss in losses:  # the page shows the stored numbers (to 4 significant digits)
        assert f"{float(f'{loss:.4g}'):g}" in shown


def test_a_run_without_an_eval_split_and_bad_options_are_refused_by_name(trained):
    no_split = {**trained.run, "config": {**trained.run["config"], "eval_steps": 0}}
    with pytest.raises(EvalInputError) as refused:
        build_request(no_split, trained.run_id, EvalOptions())
    assert refused.value.field == "perplexity" and "eval_steps=0" in str(refused.value)
    missing = run_cli(["eval", 999], trained.home)
    assert missing.returncode == 1 and "there is no run 999" in missing.stderr
    bad = run_cli(["eval", trained.run_id, "--checkpoint", 3], trained.home)
    assert bad.returncode == 2 and "--checkpoint" in bad.stderr and "valid checkpoints of run" in bad.stderr
    many = run_cli(["eval", trained.run_id, "--max-prompts", 0], trained.home)
    assert many.returncode == 2 and "--max-prompts" in many.stderr


@pytest.mark.skipif(lm_eval_installed(), reason="lm-eval is installed: the task test runs instead")
def test_tasks_without_lm_eval_say_how_to_install_it(trained):
    done = run_cli(["eval", trained.run_id, "--tasks", "tiny_sum"], trained.home)
    assert done.returncode == 1
    assert "lm-eval" in done.stderr and "pip install 'tunelab[eval]'" in done.stderr


@pytest.mark.skipif(not lm_eval_installed(), reason="lm-eval is not installed (pip install 'tunelab[eval]')")
def test_lm_eval_runs_a_local_task_offline_and_stores_its_scores(trained, tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "tiny_sum.yaml").write_text(
        "task: tiny_sum\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: tiny_sum.jsonl\ntest_split: test\n"
        "output_type: multiple_choice\ndoc_to_text: \"{{question}}\"\ndoc_to_choice: \"{{choices}}\"\n"
        "doc_to_target: \"{{answer}}\"\nmetric_list:\n  - metric: acc\n")
    rows = [{"question": f"Add the two numbers.\n\n{a} and {a}", "choices": [f"The sum is {2 * a}.", f"The sum is {2 * a + 1}."],
             "answer": 0} for a in range(3, 6)]
    (tasks / "tiny_sum.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = run_cli(["eval", trained.run_id, "--no-perplexity", "--no-generations", "--tasks", "tiny_sum",
                    "--task-path", tasks, "--json"], trained.home, env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    payload = _records(done.stdout)["lm_eval"]["payload"]
    assert payload["tasks"] == ["tiny_sum"] and payload["samples"] == {"tiny_sum": 3}
    assert 0.0 <= payload["scores"]["tiny_sum"]["acc"] <= 1.0
