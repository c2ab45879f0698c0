"""Servers sharing one history, in the store (migration 8) on SQLite and PostgreSQL, and the
identity each home keeps: heartbeats make a server live for the bound it is judged by;
orphan closing goes by server id (two servers on one host name never close each other's
live runs), closes a silent server's rows only, and a claim makes a run its claimer's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
from store_backends import database_at_version

from tunelab.orchestrator.identity import DEFAULT_SILENT_S, load_identity, silent_after_s
from tunelab.store import MIGRATIONS, SERVERS_MIGRATION, SILENT_SERVER_MESSAGE, Store

CONFIG = {"model_name": "tiny"}
HOST = "same-host"


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store(store_url) as opened:
        yield opened


def running(store: Store, server: str | None, lock: str | None = None, host: str = HOST) -> int:
    return store.create_run(CONFIG, "m", "d", devices=["cpu"], claimed_by=f"{host}:1:aa", server_id=server,
                            owner={"lock": lock})


def test_migration_8_keeps_old_runs_without_a_server(store_url: str) -> None:
    raw = database_at_version(store_url, MIGRATIONS.index(SERVERS_MIGRATION))
    raw.execute("INSERT INTO runs (status, model_name, config_json, started_at) VALUES ('completed', 'old', '{}', 1.0)")
    raw.close()
    with Store(store_url) as store:
        assert store.get_run(1)["server_id"] is None and store.servers() == []


def test_a_server_is_live_for_the_bound_after_its_beat(store: Store) -> None:
    store.beat("srv-a", HOST, f"{HOST}:1:aa")
    store.beat("srv-b", HOST, f"{HOST}:2:bb")
    assert store.live_servers(60) == {"srv-a", "srv-b"}
    time.sleep(0.3)
    store.beat("srv-b", HOST, f"{HOST}:3:cc")  # a new life of b
    assert store.live_servers(0.2) == {"srv-b"}
    assert [(s["id"], s["instance"]) for s in store.servers()] == [("srv-a", f"{HOST}:1:aa"), ("srv-b", f"{HOST}:3:cc")]


def test_orphans_are_closed_by_server_id_never_another_live_servers(store: Store) -> None:
    store.beat("srv-a", HOST, "a")
    store.beat("srv-b", HOST, "b")
    mine_dead, mine_alive = running(store, "srv-b", "dead.lock"), running(store, "srv-b", "alive.lock")
    theirs = running(store, "srv-a", "their.lock")
    legacy, legacy_elsewhere = running(store, None), running(store, None, host="other-host")
    renamed = running(store, "srv-b", "gone.lock", host="old-name")  # b's earlier life, before a host rename
    closed = store.close_orphans(lambda _folder: None, lambda lock: lock == "alive.lock", host=HOST,
                                 server_id="srv-b", silent_after_s=60)
    assert sorted(closed) == sorted([mine_dead, legacy, renamed])
    assert store.get_run(legacy_elsewhere)["status"] == "running"
    assert store.get_run(theirs)["status"] == store.get_run(mine_alive)["status"] == "running"
    # Only once a's heartbeat is silent past the bound are its runs closed, and then by any server.
    assert store.close_orphans(lambda _folder: None, server_id="srv-b", silent_after_s=60,
                               only_silent_servers=True) == []
    time.sleep(0.3)
    store.beat("srv-b", HOST, "b")
    assert store.close_orphans(lambda _folder: None, server_id="srv-b", silent_after_s=0.2,
                               only_silent_servers=True) == [theirs]
    closed_row = store.get_run(theirs)
    assert closed_row["error_message"] == SILENT_SERVER_MESSAGE and closed_row["resume_blocked"] is True
    assert store.get_run(mine_alive)["status"] == "running"


def test_a_claim_makes_the_run_its_claimers(store: Store) -> None:
    queued = store.create_run(CONFIG, "m", "d", queued=True, device_request={"num_gpus": 1}, server_id="srv-a")
    assert store.get_run(queued)["server_id"] == "srv-a"
    assert store.claim_queued(queued, f"{HOST}:2:bb", ["cpu"], server_id="srv-b")
    assert store.get_run(queued)["server_id"] == "srv-b"


def test_a_home_keeps_one_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, again = load_identity(tmp_path), load_identity(tmp_path)
    assert first == again and first.id.startswith("srv-") and load_identity(tmp_path / "other") != first
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["server-id"]  # no draft left behind
    (tmp_path / "server-id").write_text("../../etc\n")
    with pytest.raises(RuntimeError, match="does not hold a server id.*delete it"):
        load_identity(tmp_path)
    monkeypatch.setenv("TUNELAB_SERVER_SILENT_S", "4.5")
    assert silent_after_s() == 4.5
    for bad in ("0", "-3", "soon", "inf"):
        monkeypatch.setenv("TUNELAB_SERVER_SILENT_S", bad)
        assert silent_after_s() == DEFAULT_SILENT_S
