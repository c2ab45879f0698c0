"""The store's export folders (`run_exports`, migration 8) on SQLite and PostgreSQL: a folder
is recorded with its run and owner, a later export into it takes it over, folders are
found by what they hold or lie in, rows outlive their run, and the migration keeps an
older database's runs."""

from __future__ import annotations

from pathlib import Path

from store_backends import database_at_version
from tunelab.store import EXPORTS_MIGRATION, MIGRATIONS, Store


def test_an_export_folder_is_recorded_with_its_run_and_owner_and_found_by_what_it_touches(store_url: str, tmp_path: Path):
    outputs = tmp_path / "outputs"
    with Store(store_url) as store:
        alice_run = store.create_run({"model_name": "m"}, "m", "d", owned_by="alice")
        bob_run = store.create_run({"model_name": "m"}, "m", "d", owned_by="bob")
        store.record_export(outputs / "x", alice_run, "alice", "adapter")
        store.record_export(outputs / "y" / "inner", bob_run, "bob", "merged")

        [found] = store.exports_touching(outputs / "x")
        assert (found["folder"], found["run_id"], found["owner"], found["format"]) == (str(outputs / "x"), alice_run, "alice", "adapter")
        assert [r["run_id"] for r in store.exports_touching(outputs / "x" / "sub")] == [alice_run]  # lies inside
        assert [r["run_id"] for r in store.exports_touching(outputs / "y")] == [bob_run]  # holds it
        assert store.exports_touching(outputs / "xy") == []  # a name that merely starts the same
        assert store.exports_touching(outputs / "z") == []

        # A later export into the same folder takes it over; the folder is recorded once.
        store.record_export(outputs / "x", bob_run, "bob", "merged")
        assert [(r["run_id"], r["owner"]) for r in store.exports_touching(outputs / "x")] == [(bob_run, "bob")]
        assert store.exports_of_run(alice_run) == []
        assert [r["folder"] for r in store.exports_of_run(bob_run)] == [str(outputs / "y" / "inner"), str(outputs / "x")]

        # A run deleted without its files still owns what it exported.
        store.finalize_run(bob_run, status="completed")
        store.delete_run(bob_run)
        assert len(store.exports_of_run(bob_run)) == 2
        store.forget_exports([outputs / "x"])
        assert [r["folder"] for r in store.exports_of_run(bob_run)] == [str(outputs / "y" / "inner")]


def test_the_exports_migration_keeps_an_older_databases_runs(store_url: str, tmp_path: Path):
    raw = database_at_version(store_url, MIGRATIONS.index(EXPORTS_MIGRATION))
    raw.execute("INSERT INTO runs (status, model_name, config_json, started_at, owner) "
                "VALUES ('completed', 'old', '{}', 1.0, 'alice')")
    raw.close()
    with Store(store_url) as store:
        assert store.schema_version() == len(MIGRATIONS)
        [old] = store.list_runs()
        assert old["owner"] == "alice" and store.exports_of_run(old["id"]) == []
        store.record_export(tmp_path / "x", old["id"], "alice", "adapter")
        assert store.exports_touching(tmp_path / "x")[0]["run_id"] == old["id"]
