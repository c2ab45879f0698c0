"""`tunelab serve` on a shared PostgreSQL history (TUNELAB_DATABASE_URL): the server lists
the runs of that database, names it in its log, and shows its password nowhere."""

from __future__ import annotations

from store_backends import PgCluster
from tunelab.store import Store

SECRET = "pw-s3cr3t-never-shown"


def test_the_server_keeps_its_history_in_the_database_url(start_server, pg_cluster: PgCluster) -> None:
    schema = pg_cluster.create_schema()
    try:
        url = pg_cluster.url(schema, password=SECRET)  # trust authentication: accepted, unused
        with Store(url) as store:
            run_id = store.create_run({"model_name": "m"}, "shared-history", "d")
            store.finalize_run(run_id, status="completed", final_loss=1.25)
        server = start_server(extra_env={"TUNELAB_DATABASE_URL": url}, log_level="info")
        with server.client() as client:
            listed = client.get("/api/runs").json()
        assert [(r["id"], r["model_name"], r["final_loss"]) for r in listed["runs"]] == [(run_id, "shared-history", 1.25)]
        server.stop()
        printed = "\n".join(server.banner) + server.process.stdout.read()
        log = (server.home / "server-stderr.log").read_text() + (server.home / "logs" / "server.log").read_text()
        assert "run history: postgresql://postgres:***@/postgres" in log
        assert SECRET not in log and SECRET not in printed
        assert not (server.home / "tunelab.db").exists()  # the home's SQLite file is not used
    finally:
        pg_cluster.drop_schema(schema)
