"""The run queue in the store (migration 7) on SQLite and PostgreSQL: the migration keeps
old runs, their metrics, evaluations and ids (on SQLite a table rebuild); queued runs come
back in priority and position order; a claim is atomic between two connections; cancel,
move and priority change only queued runs; devices_in_use sees only running runs, and with a\nhost only that machine's, as close_orphans closes only that machine's runs."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Iterator

import pytest
from store_backends import database_at_version

from tunelab.store import MIGRATIONS, QUEUE_MIGRATION, InvalidValue, QueueJump, RunNotFound, RunNotQueued, Store

CONFIG = {"model_name": "tiny", "learning_rate": 0.0002}


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store(store_url) as opened:
        yield opened


def queue(store: Store, priority: int = 0, request: dict | None = None, owner: str | None = None) -> int:
    return store.create_run(CONFIG, "tiny-llama", "sample.jsonl", queued=True, queue_priority=priority,
                            device_request=request or {"num_gpus": 1}, owned_by=owner)


def order(store: Store) -> list[int]:
    runs = store.queued_runs()
    assert [r["queue_position"] for r in runs] == list(range(1, len(runs) + 1))
    return [r["id"] for r in runs]


def test_migration_7_keeps_rows_ids_children_and_indexes(store_url: str) -> None:
    raw = database_at_version(store_url, MIGRATIONS.index(QUEUE_MIGRATION))
    for _ in range(3):
        raw.execute("INSERT INTO runs (status, model_name, config_json, started_at, owner, modality)"
                    " VALUES ('completed', 'old', '{}', 1.0, 'alice', 'text')")
    raw.execute("DELETE FROM runs WHERE id = 3")  # the newest run was deleted: its id must stay used
    raw.execute("INSERT INTO metrics (run_id, step, loss) VALUES (1, 5, 0.5)")
    raw.execute("INSERT INTO metric_extras (run_id, step, name, value) VALUES (1, 5, 'rewards/margin', 0.25)")
    raw.execute("INSERT INTO run_evals (run_id, created_at, kind, payload) VALUES (1, 2.0, 'perplexity', '{}')")
    raw.close()

    with Store(store_url) as store:
        assert store.schema_version() == len(MIGRATIONS)
        old = store.get_run(1)
        assert (old["status"], old["owner"], old["modality"], old["queue_priority"]) == ("completed", "alice", "text", 0)
        assert old["device_request"] is None and old["devices"] is None and old["claimed_by"] is None
        assert store.get_metrics(1)[0]["loss"] == 0.5 and store.get_metric_extras(1)["rewards/margin"]["values"] == [0.25]
        assert queue(store) == 4
        store.delete_run(1)  # the foreign keys still cascade to the rebuilt table
        assert store.get_metrics(1) == [] and store.get_metric_extras(1) == {}
    if "://" in store_url:
        return  # what follows is SQLite's rebuild: PostgreSQL changed the table in place
    raw = sqlite3.connect(store_url)
    indexes = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'")}
    assert {"runs_by_start_request", "runs_by_status"} <= indexes
    assert raw.execute("SELECT COUNT(*) FROM run_evals").fetchone()[0] == 0
    assert "runs_new" not in raw.execute("SELECT group_concat(sql) FROM sqlite_master").fetchone()[0]
    raw.close()


def test_queued_runs_start_by_priority_then_position_and_can_be_moved(store: Store) -> None:
    running = store.create_run(CONFIG, "m", "d", devices=["gpu-0"], claimed_by="server-a")
    a, b, c = queue(store), queue(store), queue(store)
    urgent = queue(store, priority=5)
    assert order(store) == [urgent, a, b, c]
    first = store.queued_runs()[1]
    assert (first["status"], first["device_request"], first["devices"]) == ("queued", {"num_gpus": 1}, None)
    assert store.get_run(running)["devices"] == ["gpu-0"] and store.get_run(running)["queue_order"] is None

    store.move_queued(c, 2)
    assert order(store) == [urgent, c, a, b]
    store.move_queued(a, 4)
    assert order(store) == [urgent, c, b, a]
    with pytest.raises(InvalidValue, match="position: run .* has priority 0, which places it at positions 2 to 4 of 4"):
        store.move_queued(a, 1)
    with pytest.raises(InvalidValue, match="position: must be a whole number >= 1"):
        store.move_queued(a, 0)

    store.set_queue_priority(b, 9)
    assert order(store) == [b, urgent, c, a]
    with pytest.raises(InvalidValue, match="queue_priority: must be a whole number"):
        store.set_queue_priority(b, "high")
    with pytest.raises(RunNotQueued, match=f"run {running} is running, not queued"):
        store.move_queued(running, 1)
    with pytest.raises(RunNotQueued):
        store.set_queue_priority(running, 1)
    with pytest.raises(RunNotFound):
        store.move_queued(999, 1)


def test_a_members_move_passes_only_its_own_runs(store: Store) -> None:
    alice_1, bob_1, alice_2, alice_3 = (queue(store, owner=o) for o in ("alice", "bob", "alice", "alice"))
    store.move_queued(alice_3, 3, mover="alice")  # past its own run: allowed
    assert order(store) == [alice_1, bob_1, alice_3, alice_2]
    with pytest.raises(QueueJump, match=f"run {alice_3} would move ahead of run {bob_1} of the key 'bob'.*highest place "
                                        f"run {alice_3} can take is 3"):
        store.move_queued(alice_3, 1, mover="alice")
    assert order(store) == [alice_1, bob_1, alice_3, alice_2]
    store.move_queued(alice_1, 4, mover="alice")  # behind others' runs: allowed
    assert order(store) == [bob_1, alice_3, alice_2, alice_1]
    store.move_queued(alice_1, 1)  # no mover (an admin): anywhere in its priority
    assert order(store) == [alice_1, bob_1, alice_3, alice_2]


def test_cancel_and_claim_change_only_queued_runs(store: Store) -> None:
    a, b = queue(store), queue(store)
    assert store.cancel_queued(a) is True
    assert store.cancel_queued(a) is False
    cancelled = store.get_run(a)
    assert cancelled["status"] == "cancelled" and cancelled["ended_at"] is not None
    assert store.claim_queued(a, "server-a", ["gpu-0"]) is False
    with pytest.raises(RunNotFound):
        store.cancel_queued(999)
    assert store.finalize_run(b, status="error") is False  # finalize closes running rows only
    with pytest.raises(InvalidValue, match="status: must be completed, stopped or error"):
        store.finalize_run(b, status="cancelled")

    assert store.claim_queued(b, "server-a", ["gpu-1"], owner={"lock": "run-1.lock", "pid": 42}) is True
    claimed = store.get_run(b)
    assert (claimed["status"], claimed["devices"], claimed["claimed_by"], claimed["owner_lock"]) == (
        "running", ["gpu-1"], "server-a", "run-1.lock")
    assert store.cancel_queued(b) is False and store.get_run(b)["status"] == "running"
    assert store.queued_runs() == []
    assert store.close_orphans(lambda _folder: None, owner_is_alive=lambda lock: lock == "run-1.lock") == []
    with pytest.raises(InvalidValue, match="devices: must be a list of distinct device ids"):
        store.claim_queued(queue(store), "server-a", ["gpu-0", "gpu-0"])


def test_devices_in_use_are_those_of_running_runs(store: Store) -> None:
    first = store.create_run(CONFIG, "m", "d", devices=["gpu-0", "gpu-1"])
    waiting = queue(store)
    assert store.devices_in_use() == {"gpu-0", "gpu-1"}
    store.claim_queued(waiting, "server-a", ["cpu"])
    assert store.devices_in_use() == {"gpu-0", "gpu-1", "cpu"}
    store.finalize_run(first, status="completed")
    assert store.devices_in_use() == {"cpu"}


def test_machines_sharing_one_database_see_and_close_only_their_own_runs(store: Store) -> None:
    # Two machines' servers (claimed_by "host:pid:random") and a `tunelab train` (no claimant).
    here = store.create_run(CONFIG, "m", "d", devices=["gpu-0"], claimed_by="box-a:11:aa")
    there = store.create_run(CONFIG, "m", "d", devices=["gpu-0", "gpu-1"], claimed_by="box-b:22:bb")
    prefix = store.create_run(CONFIG, "m", "d", devices=["gpu-3"], claimed_by="box-a2:33:cc")  # not box-a's
    local = store.create_run(CONFIG, "m", "d", devices=["gpu-2"])
    assert store.devices_in_use(host="box-a") == {"gpu-0", "gpu-2"}
    assert store.devices_in_use(host="box-b") == {"gpu-0", "gpu-1", "gpu-2"}
    assert store.devices_in_use() == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
    closed = store.close_orphans(lambda _folder: None, host="box-a")
    assert sorted(closed) == sorted([here, local])
    assert store.get_run(there)["status"] == store.get_run(prefix)["status"] == "running"


def test_two_servers_racing_for_each_queued_run_claim_it_exactly_once(store_url: str) -> None:
    db = store_url
    with Store(db) as setup:
        ids = [queue(setup) for _ in range(20)]
    wins: dict[str, list[int]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def server(name: str) -> None:
        # Each "server" has its own connection, as two processes on one database would.
        with Store(db) as own:
            for run_id in ids:
                barrier.wait()
                if own.claim_queued(run_id, name, [f"gpu-{run_id}"]):
                    wins[name].append(run_id)

    threads = [threading.Thread(target=server, args=(name,)) for name in wins]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(wins["a"] + wins["b"]) == ids
    with Store(db) as check:
        assert all(check.get_run(i)["claimed_by"] == ("a" if i in wins["a"] else "b") for i in ids)
