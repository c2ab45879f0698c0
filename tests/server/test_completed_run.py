"""One real training run through the API, watched over SSE to the end, then everything
the server says about it afterwards: history, detail, replay, plot, status, and that
the server process itself never loaded torch."""

from __future__ import annotations

from pathlib import Path

import pytest
from sse_helpers import final_event, progress_steps, start_run, stream_until_end

pytestmark = pytest.mark.slow  # each test trains through a real worker

STEPS = 12
SECRET = "hf_do_not_store_this_9b1f"


@pytest.fixture(scope="module", params=["torch", pytest.param("mlx", marks=pytest.mark.mlx)])
def completed(request, live_server, demo_assets):
    """One finished run per training backend: the API must not care which one trained."""
    if request.param == "mlx":
        pytest.importorskip("mlx.core", reason="the mlx backend needs `pip install mlx[cpu] mlx-lm`")
    client = live_server.client()
    body = {
        "backend": request.param,
        "model_name": str(demo_assets.model_dir), "local_datasets": [str(demo_assets.alpaca)],
        "max_steps": STEPS, "max_seq_length": 128, "batch_size": 2, "gradient_accumulation_steps": 1,
        "learning_rate": 3e-3, "lora_r": 8, "hf_token": SECRET, "display_name": "server test run",
    }
    job = start_run(client, body)
    # last_event_id=0 asks for every step, however far the run got before we connected.
    events = stream_until_end(client, params={"last_event_id": 0})
    return job, events


def test_the_stream_carries_every_step_then_complete(completed):
    job, events = completed
    assert events[0].retry is not None and events[0].event == "message"  # the retry: line comes first
    progress = [e for e in events if e.event == "progress"]
    assert [e.data["step"] for e in progress] == list(range(1, STEPS + 1))
    assert all(e.id == f"{job}:{e.data['step']}" and e.data["run_id"] == job for e in progress)
    end = final_event(events)
    assert end.event == "complete"
    assert end.data["status"] == "completed" and end.data["final_step"] == STEPS
    assert "stack" not in end.data


def test_history_lists_the_run_completed_with_a_sparkline(live_server, completed):
    job, events = completed
    listed = live_server.client().get("/api/runs").json()
    run = next(r for r in listed["runs"] if r["id"] == job)
    losses = [e.data["loss"] for e in events if e.event == "progress"]
    assert run["status"] == "completed" and run["modality"] == "text"
    assert run["final_step"] == STEPS and run["total_steps"] == STEPS
    assert run["loss_sparkline"] == pytest.approx(losses)  # fewer than 50 points: all of them
    assert run["can_resume"] is False


def test_detail_has_the_sanitized_config_and_paired_metrics(live_server, completed):
    job, events = completed
    response = live_server.client().get(f"/api/runs/{job}")
    detail = response.json()
    assert SECRET not in response.text
    assert "hf_token" not in detail["config"]
    assert detail["config"]["max_steps"] == STEPS
    metrics = detail["metrics"]
    assert metrics["steps"] == list(range(1, STEPS + 1))
    extra = metrics.pop("extra")
    assert len({len(v) for v in metrics.values()}) == 1  # paired arrays
    if detail["config"]["backend"] == "torch":
        # TRL logs token accuracy and entropy at every step: extra series, stored per step as streamed.
        streamed = [e.data["extra"]["mean_token_accuracy"] for e in events if e.event == "progress"]
        assert extra["mean_token_accuracy"] == {"steps": list(range(1, STEPS + 1)), "values": pytest.approx(streamed)}
        assert extra["entropy"]["steps"] == list(range(1, STEPS + 1))
        assert not any(name.endswith("runtime") or name.endswith("per_second") for name in extra)
    else:
        assert extra == {}  # the mlx loop logs only the fixed numbers
    assert metrics["loss"] == pytest.approx([e.data["loss"] for e in events if e.event == "progress"])
    assert SECRET not in live_server.client().get("/api/runs").text


def test_reconnecting_with_last_event_id_replays_exactly_the_missed_steps(live_server, completed):
    client = live_server.client()
    job = completed[0]
    after_seven = stream_until_end(client, headers={"Last-Event-ID": f"{job}:7"})
    assert progress_steps(after_seven) == list(range(8, STEPS + 1))
    assert final_event(after_seven).event == "complete"
    by_query = stream_until_end(client, params={"last_event_id": f"{job}:{STEPS - 2}"})
    assert progress_steps(by_query) == [STEPS - 1, STEPS]
    assert progress_steps(stream_until_end(client, headers={"Last-Event-ID": f"{job}:{STEPS}"})) == []


def test_status_and_metrics_keep_the_finished_run(live_server, completed):
    job, _ = completed
    client = live_server.client()
    status = client.get("/api/train/status").json()
    assert status["phase"] == "completed" and status["is_training_running"] is False
    assert status["job_id"] == job and status["step"] == STEPS and status["modality"] == "text"
    assert status["histories"]["steps"] == list(range(1, STEPS + 1))
    detail = client.get(f"/api/runs/{job}").json()
    assert status["histories"]["extra"] == detail["metrics"]["extra"]  # live and stored series agree
    assert status["extra"] == {name: series["values"][-1] for name, series in detail["metrics"]["extra"].items()}
    assert client.get("/api/train/metrics").json()["histories"] == status["histories"]


def test_loss_plot_comes_in_both_themes(live_server, completed):
    client = live_server.client()
    light = client.get("/api/train/plot.png", params={"theme": "light"})
    dark = client.get("/api/train/plot.png", params={"theme": "dark"})
    for response in (light, dark):
        assert response.status_code == 200
        assert response.headers["content-type"] == "image/png"
        assert response.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert light.content != dark.content


def test_rename(live_server, completed):
    job, _ = completed
    client = live_server.client()
    renamed = client.patch(f"/api/runs/{job}", json={"display_name": "  better name  "})
    assert renamed.status_code == 200 and renamed.json()["display_name"] == "better name"
    assert client.get(f"/api/runs/{job}").json()["display_name"] == "better name"
    refused = client.patch(f"/api/runs/{job}", json={"display_name": "two\nlines"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "display_name"


def test_the_server_process_has_no_torch_loaded(live_server, completed):
    maps = Path(f"/proc/{live_server.pid}/maps").read_text()
    assert "libtorch" not in maps and "torch/lib" not in maps
    detail = live_server.client().get("/api/health", params={"detail": 1}).json()
    assert detail["pid"] == live_server.pid
    assert detail["heavy_modules"] == []
