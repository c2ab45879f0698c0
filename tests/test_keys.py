"""Named API keys: names and roles checked, secrets kept only as hashes, revocation
final, the store's keys migration applied to an older database, and the CLI commands."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from store_backends import database_at_version
from tunelab.cli.main import app
from tunelab.keys import KeyRefused, check_name, check_role, looks_like_key, new_secret, secret_hash
from tunelab.store import KEYS_MIGRATION, MIGRATIONS, KeyNameTaken, KeyNotFound, Store


def database_bytes(db: Path) -> bytes:
    """The database as it lies on disk, write-ahead log included."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def test_secrets_are_random_prefixed_and_stored_only_as_their_hash(tmp_path: Path) -> None:
    first, second = new_secret(), new_secret()
    assert first != second and looks_like_key(first) and len(first) >= 40
    db = tmp_path / "runs.db"
    with Store(db) as store:
        store.add_api_key("alice", "member", secret_hash(first))
        found = store.find_api_key(secret_hash(first))
        assert found["name"] == "alice" and found["role"] == "member"
        assert store.find_api_key(secret_hash(second)) is None
        assert "secret_sha256" not in store.list_api_keys()[0]
    on_disk = database_bytes(db)
    assert first.encode() not in on_disk and first[4:].encode() not in on_disk
    assert secret_hash(first).encode() in on_disk


def test_a_revoked_key_is_not_found_and_its_name_is_never_reused(store_url: str) -> None:
    secret = new_secret()
    with Store(store_url) as store:
        store.add_api_key("bob", "viewer", secret_hash(secret))
        with pytest.raises(KeyNameTaken, match="a key with that name exists"):
            store.add_api_key("bob", "admin", secret_hash(new_secret()))
        store.revoke_api_key("bob")
        assert store.find_api_key(secret_hash(secret)) is None
        assert store.list_api_keys()[0]["revoked_at"] is not None
        with pytest.raises(KeyNotFound, match="no active key named 'bob'"):
            store.revoke_api_key("bob")
        with pytest.raises(KeyNameTaken, match="revoked key had it"):
            store.add_api_key("bob", "viewer", secret_hash(new_secret()))


@pytest.mark.parametrize("name", ["", " ", "local", "LOCAL", "a b", "-x", "x" * 65, "é", "a/b", None, 3])
def test_bad_key_names_are_refused_naming_the_field(name: object) -> None:
    with pytest.raises(KeyRefused, match="^name: "):
        check_name(name)


def test_roles_are_admin_member_or_viewer() -> None:
    assert [check_role(r) for r in ("admin", "member", "viewer")] == ["admin", "member", "viewer"]
    with pytest.raises(KeyRefused, match="role: must be one of admin, member, viewer, got 'owner'"):
        check_role("owner")
    assert check_name(" ci-bot.2 ") == "ci-bot.2"


def test_the_keys_migration_keeps_older_runs_and_leaves_them_without_owner(store_url: str) -> None:
    raw = database_at_version(store_url, MIGRATIONS.index(KEYS_MIGRATION))
    raw.execute("INSERT INTO runs (status, model_name, config_json, started_at) VALUES ('completed', 'old', '{}', 1.0)")
    raw.close()
    with Store(store_url) as store:
        assert store.schema_version() == len(MIGRATIONS)
        assert store.list_runs()[0]["owner"] is None
        owned = store.create_run({"model_name": "m"}, "m", "d", owned_by="alice")
        assert store.get_run(owned)["owner"] == "alice" and "owner" not in store.get_run(owned)["config"]


def test_the_cli_creates_lists_and_revokes_keys_printing_the_secret_once(home: Path) -> None:
    runner = CliRunner()
    created = runner.invoke(app, ["keys", "create", "alice", "--role", "admin"])
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[0]
    assert looks_like_key(secret)
    with Store() as store:
        assert store.find_api_key(secret_hash(secret))["role"] == "admin"
    listed = runner.invoke(app, ["keys", "list"])
    assert "alice" in listed.stdout and "admin" in listed.stdout and secret not in listed.stdout
    for args, message in ((["keys", "create", "bob", "--role", "owner"], "role: must be one of"),
                          (["keys", "create", "alice"], "'alice' is taken"),
                          (["keys", "revoke", "carol"], "no active key named 'carol'")):
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and message in refused.stderr, refused.output
    assert runner.invoke(app, ["keys", "revoke", "alice"]).exit_code == 0
    with Store() as store:
        assert store.find_api_key(secret_hash(secret)) is None
