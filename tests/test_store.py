"""The run store on a real SQLite file and on a real PostgreSQL database (tests taking
`store` or `store_url` run on both): schema, upserts, history operations, orphan closing,
and writes that survive another process holding the database lock."""

from __future__ import annotations

import contextlib
import math
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from checkpoint_factory import make_checkpoint
from store_backends import database_at_version, raw_connection
from tunelab import events
from tunelab.checkpoints import latest_valid_checkpoint
from tunelab.config.run_config import parse_config
from tunelab.orchestrator.metric_buffer import MetricBuffer
from tunelab.store import (
    MIGRATIONS,
    ORPHAN_MESSAGE,
    AlreadyResumed,
    DuplicateStartRequest,
    InvalidValue,
    RunIsRunning,
    RunNotFound,
    Store,
    StoreBusy,
    StoreError,
    sparkline,
)

CONFIG = {"model_name": "tiny", "learning_rate": 0.0002, "s3": None}

# Holds an exclusive write lock on the database from another process until its stdin
# closes or the given seconds pass, announcing "locked" once it holds it. On PostgreSQL
# EXCLUSIVE mode on the tables lets readers in and keeps every writer out, as SQLite's lock.
LOCK_HOLDER = r"""
import select, sys
if "://" in sys.argv[1]:
    import psycopg
    conn = psycopg.connect(sys.argv[1], autocommit=True)
    conn.execute("BEGIN")
    conn.execute("LOCK TABLE runs, metrics IN EXCLUSIVE MODE")
else:
    import sqlite3
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
select.select([sys.stdin], [], [], float(sys.argv[2]))
conn.execute("COMMIT")
print("released", flush=True)
"""


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store(store_url) as opened:
        yield opened


@contextlib.contextmanager
def lock_held_by_other_process(db: str | Path, seconds: float) -> Iterator[subprocess.Popen]:
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db), str(seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)


def assert_locked(db: str | Path) -> None:
    if "://" in str(db):
        import psycopg

        with psycopg.connect(str(db), autocommit=True) as probe:
            with pytest.raises(psycopg.errors.LockNotAvailable), probe.transaction():
                probe.execute("LOCK TABLE runs IN ROW EXCLUSIVE MODE NOWAIT")
        return
    probe = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("BEGIN IMMEDIATE")
    finally:
        probe.close()


def new_run(store: Store, **kwargs) -> int:
    return store.create_run(CONFIG, "tiny-llama", "sample.jsonl", **kwargs)


def test_create_and_read_back(store: Store) -> None:
    run_id = new_run(store, display_name="  first try  ")
    run = store.get_run(run_id)
    assert run["status"] == "running"
    assert run["config"] == CONFIG
    assert (run["model_name"], run["dataset_name"], run["display_name"]) == ("tiny-llama", "sample.jsonl", "first try")
    assert run["loss_sparkline"] == [] and run["cancel_requested"] is False and run["resume_blocked"] is False
    assert isinstance(run["started_at"], float) and run["ended_at"] is None
    assert store.get_run(run_id + 1) is None


def test_database_is_wal_and_versioned(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with Store(db) as store:
        run_id = new_run(store)
        assert store.schema_version() == len(MIGRATIONS)
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()
    with Store(f"sqlite:///{db}") as reopened:  # migrations do not run twice
        assert reopened.get_run(run_id)["model_name"] == "tiny-llama"


def test_refuses_a_database_from_a_newer_version_or_not_a_database(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    raw = sqlite3.connect(newer)
    raw.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    raw.close()
    with pytest.raises(StoreError, match="upgrade tunelab"):
        Store(newer)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot be used as the run database"):
        Store(garbage)
    with pytest.raises(InvalidValue, match="database: mysql:// databases are not supported; use a file path"):
        Store("mysql://db.example/tunelab")
    with pytest.raises(InvalidValue, match="database: a sqlite URL needs an absolute path"):
        Store("sqlite://relative.db")


def test_runs_from_before_modalities_read_as_text_and_new_ones_wait_for_their_worker(store_url: str) -> None:
    raw = database_at_version(store_url, 2)
    raw.execute("INSERT INTO runs (status, model_name, config_json, started_at) VALUES ('completed', 'old', '{}', 1.0)")
    raw.close()
    with Store(store_url) as store:
        assert store.schema_version() == len(MIGRATIONS)
        assert [r["modality"] for r in store.list_runs()] == ["text"]
        assert store.get_metric_extras(1) == {}
        fresh = new_run(store)
        assert store.get_run(fresh)["modality"] is None  # unknown until the worker has prepared the data
        store.set_modality(fresh, "vision")
        assert store.get_run(fresh)["modality"] == "vision"
        resumed = new_run(store, resumed_from_run_id=fresh, modality="vision")
        assert store.get_run(resumed)["modality"] == "vision"
        with pytest.raises(InvalidValue, match="modality: must be one of text, vision"):
            store.set_modality(fresh, "smell")
        with pytest.raises(InvalidValue, match="modality"):
            new_run(store, modality="Vision")
        with pytest.raises(RunNotFound):
            store.set_modality(fresh + 10, "text")


def test_modality_events_name_a_known_modality() -> None:
    assert events.parse(events.modality("vision"))["modality"] == "vision"
    with pytest.raises(ValueError, match="add it to events.MODALITIES"):
        events.modality("smell")
    for bad in ("smell", None, 3):
        with pytest.raises(events.MalformedEvent, match="modality event"):
            events.parse({"type": "modality", "modality": bad})


def test_default_location_is_the_tunelab_home(home: Path) -> None:
    with Store() as store:
        new_run(store)
    assert (home / "tunelab.db").is_file()


@pytest.mark.parametrize(
    "config, field",
    [
        ({"hf_token": None}, "config.hf_token"),
        ({"s3": {"bucket": "b", "Secret_Access_Key": "x"}}, "config.s3.Secret_Access_Key"),
        ({"extra": [{"password": "p"}]}, "config.extra[0].password"),
    ],
)
def test_secret_named_keys_are_refused(store: Store, config: dict, field: str) -> None:
    with pytest.raises(InvalidValue) as info:
        store.create_run(config, "m", "d")
    assert info.value.field == field
    assert store.count_runs() == 0


def test_public_config_stores_no_secret_bytes(tmp_path: Path) -> None:
    secrets = ["hf_SECRETSECRET123", "wandb-secret-456", "AKIASECRETKEY", "aws-secret-789"]
    cfg = parse_config({
        "model_name": "org/m", "dataset": "org/d", "hf_token": secrets[0], "report_to": "wandb", "wandb_token": secrets[1],
        "s3": {"bucket": "b", "access_key_id": secrets[2], "secret_access_key": secrets[3]},
    })
    db = tmp_path / "runs.db"
    with Store(db) as store:
        run_id = store.create_run(cfg.public(), cfg.model_name, cfg.dataset_label)
        assert store.get_run(run_id)["config"]["s3"]["bucket"] == "b"
    written = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("runs.db"))
    assert b"org/m" in written
    for secret in secrets:
        assert secret.encode() not in written


def test_metric_upserts_keep_known_values(store: Store) -> None:
    run_id = new_run(store)
    store.add_metrics(run_id, [
        events.progress(2, loss=1.5, learning_rate=1e-4, total_steps=10, eta_seconds=3.0),  # extra keys are ignored
        {"step": 1, "loss": 2.0, "grad_norm": float("nan"), "num_tokens": 128.0},
    ])
    store.add_metrics(run_id, [{"step": 2, "loss": None, "eval_loss": 1.7, "grad_norm": float("inf")}])
    store.add_metrics(run_id, [{"step": 1, "grad_norm": 0.5}])
    rows = store.get_metrics(run_id)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0] == {"step": 1, "loss": 2.0, "learning_rate": None, "grad_norm": 0.5, "eval_loss": None, "epoch": None,
                       "num_tokens": 128, "elapsed_seconds": None}
    assert (rows[1]["loss"], rows[1]["learning_rate"], rows[1]["eval_loss"], rows[1]["grad_norm"]) == (1.5, 1e-4, 1.7, None)
    arrays = store.metric_arrays(run_id)
    assert arrays["steps"] == [1, 2] and arrays["loss"] == [2.0, 1.5] and arrays["eval_loss"] == [None, 1.7]
    assert set(arrays) == {"steps", "loss", "learning_rate", "grad_norm", "eval_loss", "epoch", "num_tokens", "elapsed_seconds",
                           "extra"}


def test_extra_metrics_are_stored_per_step_by_name(store: Store) -> None:
    run_id = new_run(store)
    store.add_metrics(run_id, [
        events.progress(1, loss=2.0, extra={"mean_token_accuracy": 0.25, "entropy": 3.5}),
        events.progress(2, loss=1.8, extra={"mean_token_accuracy": 0.3}),
        events.progress(2, eval_loss=1.9, extra={"eval_mean_token_accuracy": 0.4}),  # HF logs eval separately
    ])
    # A repeated report for a step replaces the value; one that lacks a name keeps it.
    store.add_metrics(run_id, [{"step": 2, "extra": {"mean_token_accuracy": 0.35}}, {"step": 1}])
    assert store.get_metric_extras(run_id) == {
        "entropy": {"steps": [1], "values": [3.5]},
        "eval_mean_token_accuracy": {"steps": [2], "values": [0.4]},
        "mean_token_accuracy": {"steps": [1, 2], "values": [0.25, 0.35]},
    }
    assert store.metric_arrays(run_id)["extra"] == store.get_metric_extras(run_id)
    # The store checks names and values itself too, whoever calls it.
    store.add_metrics(run_id, [{"step": 3, "extra": {"bad name": 1.0, "x" * 65: 1.0, "nan": math.nan, "ok": 1}}])
    assert set(store.get_metric_extras(run_id)) == {"entropy", "eval_mean_token_accuracy", "mean_token_accuracy", "ok"}
    store.finalize_run(run_id, status="completed")
    store.delete_run(run_id)
    assert store.get_metric_extras(run_id) == {}


def test_extra_metrics_are_bounded_and_checked_at_the_event_boundary() -> None:
    many = {f"m{i}": float(i) for i in range(events.EXTRA_MAX_COUNT + 10)}
    assert list(events.clean_extra(many)) == [f"m{i}" for i in range(events.EXTRA_MAX_COUNT)]
    raw = {"type": "progress", "step": 4, "loss": 1.0, "extra": {
        "rewards/margins": 0.5, "ndcg@10": 0.7, "eval_mrr@10": "0.6", "loss": 9.0, "inf": math.inf, "flag": True,
        "-lead": 1.0, "a b": 1.0, "é": 1.0, "x" * 65: 1.0, 7: 1.0, "nested": {"a": 1}}}
    parsed = events.parse(raw)
    assert parsed["extra"] == {"rewards/margins": 0.5, "ndcg@10": 0.7, "eval_mrr@10": 0.6} and parsed["loss"] == 1.0
    for junk in ("not a mapping", [1, 2], None):
        assert events.parse({**raw, "extra": junk})["extra"] == {}


def test_metric_rows_are_checked(store: Store) -> None:
    run_id = new_run(store)
    for bad in ({"loss": 1.0}, {"step": -1}, {"step": True}, {"step": 1.5}):
        with pytest.raises(InvalidValue, match="step"):
            store.add_metrics(run_id, [bad])
    with pytest.raises(RunNotFound):
        store.add_metrics(run_id + 99, [{"step": 1, "loss": 1.0}])
    assert store.get_metrics(run_id) == []


def test_finalize_once(store: Store) -> None:
    run_id = new_run(store)
    store.set_total_steps(run_id, 40)
    store.set_output_dir(run_id, "/tmp/out")
    with pytest.raises(InvalidValue, match="status"):
        store.finalize_run(run_id, status="running")
    losses = [3.0 - i * 0.01 for i in range(120)]
    assert store.finalize_run(run_id, status="completed", final_step=40, final_loss=1.81, output_dir="/tmp/out",
                              loss_sparkline=losses)
    run = store.get_run(run_id)
    assert (run["status"], run["total_steps"], run["final_step"], run["final_loss"]) == ("completed", 40, 40, 1.81)
    assert run["ended_at"] >= run["started_at"] and run["duration_seconds"] >= 0
    assert len(run["loss_sparkline"]) == 50 and run["loss_sparkline"][0] == 3.0 and run["loss_sparkline"][-1] == losses[-1]
    # A late second finalizer (say, the watchdog) changes nothing.
    assert not store.finalize_run(run_id, status="error", error_message="late")
    assert store.get_run(run_id)["status"] == "completed"
    with pytest.raises(RunNotFound):
        store.finalize_run(run_id + 1, status="error")


def test_list_newest_first_with_paging(store: Store) -> None:
    ids = [new_run(store) for _ in range(5)]
    assert [r["id"] for r in store.list_runs()] == ids[::-1]
    assert [r["id"] for r in store.list_runs(limit=2, offset=1)] == [ids[3], ids[2]]
    assert store.count_runs() == 5
    for limit, offset in ((0, 0), (1, -1), (True, 0)):
        with pytest.raises(InvalidValue):
            store.list_runs(limit=limit, offset=offset)


def test_rename(store: Store) -> None:
    run_id = new_run(store)
    store.rename_run(run_id, "  better name ")
    assert store.get_run(run_id)["display_name"] == "better name"
    for bad in ("", "   ", "x" * 201, "two\nlines", None):
        with pytest.raises(InvalidValue, match="display_name"):
            store.rename_run(run_id, bad)
    store.rename_run(run_id, "y" * 200)
    with pytest.raises(RunNotFound):
        store.rename_run(run_id + 1, "name")


def test_delete_refused_while_running_then_removes_metrics(store: Store, store_url: str) -> None:
    run_id = new_run(store)
    store.add_metrics(run_id, [{"step": 1, "loss": 1.0}])
    with pytest.raises(RunIsRunning):
        store.delete_run(run_id)
    store.finalize_run(run_id, status="error", error_message="boom")
    assert store.delete_run(run_id)["error_message"] == "boom"
    assert store.get_run(run_id) is None
    raw = raw_connection(store_url)
    assert raw.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0
    raw.close()
    with pytest.raises(RunNotFound):
        store.delete_run(run_id)
    assert new_run(store) != run_id  # ids are never reused


def test_resume_once(store: Store) -> None:
    first = new_run(store)
    store.finalize_run(first, status="error")
    second = new_run(store, resumed_from_run_id=first)
    store.mark_resumed(first, second)
    assert store.get_run(first)["resumed_by_run_id"] == second
    assert store.get_run(second)["resumed_from_run_id"] == first
    with pytest.raises(AlreadyResumed, match=f"already resumed by run {second}"):
        store.mark_resumed(first, second + 1)
    with pytest.raises(RunNotFound):
        store.mark_resumed(second + 5, second)


def test_start_request_ids_are_unique(store: Store) -> None:
    run_id = new_run(store, start_request_id="req-1")
    assert store.find_by_start_request_id("req-1")["id"] == run_id
    assert store.find_by_start_request_id("req-2") is None
    with pytest.raises(DuplicateStartRequest) as info:
        new_run(store, start_request_id="req-1")
    assert info.value.run_id == run_id
    new_run(store)
    new_run(store)  # many runs without a request id are fine


def test_runs_sharing_output_dir(store: Store, tmp_path: Path) -> None:
    shared = tmp_path / "out" / "run-a"
    shared.mkdir(parents=True)
    alias = tmp_path / "alias"
    alias.symlink_to(shared, target_is_directory=True)
    a, b, c, d, e = (new_run(store) for _ in range(5))
    store.set_output_dir(a, shared)
    store.set_output_dir(b, alias)  # same folder through a link
    store.set_output_dir(c, shared / "nested")
    store.set_output_dir(d, tmp_path / "out" / "run-a2")  # a sibling whose name starts alike
    assert store.runs_sharing_output_dir(shared, except_run_id=a) == [b, c]
    assert store.runs_sharing_output_dir(shared / "nested", except_run_id=c) == [a, b]
    assert store.runs_sharing_output_dir(tmp_path / "out" / "run-a2", except_run_id=d) == []
    assert e not in store.runs_sharing_output_dir(tmp_path / "out")


def test_close_orphans(store: Store, tmp_path: Path) -> None:
    resumable, broken, cancelled, no_dir, finished = (new_run(store) for _ in range(5))
    for run_id in (resumable, broken, cancelled):
        folder = tmp_path / f"out-{run_id}"
        make_checkpoint(folder, 4)
        store.set_output_dir(run_id, folder)
    make_checkpoint(tmp_path / f"out-{broken}", 8, optimizer=None)
    (tmp_path / f"out-{broken}" / "checkpoint-4" / "scheduler.pt").unlink()
    store.mark_cancel_requested(cancelled)
    store.finalize_run(finished, status="completed")
    store.add_metrics(resumable, [{"step": s, "loss": 5.0 - s, "elapsed_seconds": s * 2.0} for s in range(1, 5)])

    closed = store.close_orphans(latest_valid_checkpoint)
    assert sorted(closed) == [resumable, broken, cancelled, no_dir]
    run = store.get_run(resumable)
    assert (run["status"], run["error_message"], run["resume_blocked"]) == ("error", ORPHAN_MESSAGE, False)
    assert (run["final_step"], run["final_loss"], run["duration_seconds"], run["loss_sparkline"]) == (4, 1.0, 8.0, [4.0, 3.0, 2.0, 1.0])
    assert (store.get_run(broken)["status"], store.get_run(broken)["resume_blocked"]) == ("error", True)
    assert (store.get_run(no_dir)["status"], store.get_run(no_dir)["resume_blocked"]) == ("error", True)
    run = store.get_run(cancelled)
    assert (run["status"], run["error_message"], run["resume_blocked"]) == ("stopped", None, True)
    assert store.get_run(finished)["status"] == "completed"
    assert store.close_orphans(latest_valid_checkpoint) == []


def test_close_orphans_survives_a_failing_finder(store: Store) -> None:
    run_id = new_run(store)
    store.set_output_dir(run_id, "/nonexistent/place")

    def finder(path: str) -> Path:
        raise PermissionError(path)

    assert store.close_orphans(finder) == [run_id]
    assert store.get_run(run_id)["resume_blocked"] is True


def test_sparkline() -> None:
    assert sparkline([1.0, float("nan"), None, 2.0, float("inf")]) == [1.0, 2.0]
    many = [float(i) for i in range(1000)]
    line = sparkline(many)
    assert len(line) == 50 and line[0] == 0.0 and line[-1] == 999.0 and line == sorted(line)
    assert sparkline(many[:50]) == many[:50]


def test_writes_wait_out_a_lock_held_by_another_process(store_url: str) -> None:
    db = store_url
    with Store(db) as store:
        run_id = new_run(store)
        rows = [{"step": s, "loss": 1.0 / s} for s in range(1, 51)]
        with lock_held_by_other_process(db, seconds=3) as holder:
            assert_locked(db)
            store.add_metrics(run_id, rows)
            store.finalize_run(run_id, status="completed", final_step=50)
            assert holder.stdout.readline().strip() == "released"
        assert [r["step"] for r in store.get_metrics(run_id)] == list(range(1, 51))
        assert store.get_run(run_id)["status"] == "completed"


def test_lock_outlasting_the_retry_window_raises_and_buffer_keeps_rows(store_url: str) -> None:
    db = store_url
    with Store(db, retry_seconds=0.3) as store:
        run_id = new_run(store)
        buffer = MetricBuffer()
        flags = [buffer.add({"step": s, "loss": float(s)}) for s in range(1, 13)]
        assert flags == [False] * 9 + [True] * 3
        with lock_held_by_other_process(db, seconds=120):
            with pytest.raises(StoreBusy, match="stayed locked"):
                store.mark_cancel_requested(run_id)
            with pytest.raises(StoreBusy):
                buffer.flush(store, run_id)
            assert buffer.pending() == 12
            buffer.add({"step": 13, "loss": 13.0})
            assert store.get_run(run_id)["status"] == "running"  # reads still work (SQLite: under WAL)
        assert buffer.flush(store, run_id) == 13
        assert buffer.pending() == 0
        assert [r["step"] for r in store.get_metrics(run_id)] == list(range(1, 14))
        assert buffer.flush(store, run_id) == 0


def test_metric_buffer_flushes_a_row_that_waited_the_interval(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = new_run(store)
    buffer = MetricBuffer(flush_after_s=0.3)
    assert buffer.add({"step": 1, "loss": 1.0}) is False and buffer.due() is False
    time.sleep(0.4)  # a slow step: no 10 rows for a long while
    assert buffer.due() is True
    assert buffer.add({"step": 2, "loss": 2.0}) is True  # the oldest row is due, so the batch goes
    buffer.flush_in_background(store, run_id)
    deadline = time.monotonic() + 10
    while len(store.get_metrics(run_id)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [r["step"] for r in store.get_metrics(run_id)] == [1, 2]
    assert buffer.pending() == 0 and buffer.due() is False
    assert buffer.add({"step": 3}) is False  # the clock starts again with the next row
    monkeypatch.setenv("TUNELAB_METRICS_FLUSH_S", "nonsense")
    assert MetricBuffer().flush_after_s == 2.0
    monkeypatch.setenv("TUNELAB_METRICS_FLUSH_S", "0.5")
    assert MetricBuffer().flush_after_s == 0.5


def test_metric_buffer_is_capped(caplog: pytest.LogCaptureFixture) -> None:
    buffer = MetricBuffer(flush_at=2, max_pending=5)
    with caplog.at_level("WARNING", logger="tunelab.orchestrator.metric_buffer"):
        for step in range(8):
            buffer.add({"step": step})
    assert buffer.pending() == 5 and buffer.dropped == 3
    assert len([r for r in caplog.records if "dropping the oldest" in r.message]) == 1
    with pytest.raises(ValueError):
        MetricBuffer(flush_at=0)


def test_concurrent_threads(store: Store) -> None:
    run_ids = [new_run(store) for _ in range(3)]
    errors: list[BaseException] = []

    def writer(run_id: int) -> None:
        try:
            for step in range(1, 41):
                store.add_metrics(run_id, [{"step": step, "loss": math.log(step + 1)}])
                store.list_runs(limit=5)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(r,)) for r in run_ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for run_id in run_ids:
        assert len(store.get_metrics(run_id)) == 40


def test_closed_store_refuses_work(store_url: str) -> None:
    store = Store(store_url)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.count_runs()
