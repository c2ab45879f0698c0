"""The store suite's two databases: a SQLite file per test, and a fresh database per test on
a private PostgreSQL cluster that listens only on a unix socket in a temporary folder.

`store_url` (parametrized sqlite / postgresql) is what a store test opens: on PostgreSQL a
fresh schema per test (the URL sets its search_path), far quicker than a database per test,
and dropped after it. `pg_cluster` starts the cluster once per test process (initdb + pg_ctl from Debian's postgresql package,
as the `postgres` system user when the tests run as root — initdb refuses root) and stops
it at the end. Without the server binaries or psycopg the PostgreSQL cases skip, saying
what to install — except under CI (CI=true), which installs both and must run them.
`database_at_version` builds a database as an older tunelab left it, in either dialect.
"""

from __future__ import annotations

import itertools
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from glob import glob
from pathlib import Path
from typing import Any, Iterator

import pytest

from tunelab.store import dialect as store_dialect
from tunelab.store import MIGRATIONS

SUPERUSER = "postgres"


def _server_bindir() -> Path | None:
    """The newest Debian PostgreSQL server's bin folder, else wherever initdb is on PATH."""
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: [int(n) for n in re.findall(r"\d+", p.split("/")[3])])
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


class PgCluster:
    """One throwaway cluster: trust authentication on a socket only this machine sees, and
    no fsync (its data dies with the test run)."""

    def __init__(self, bindir: Path, root: Path, run_as: str | None):
        self.bindir, self.root, self.run_as = bindir, root, run_as
        self.data, self.socket_dir = root / "data", root
        self._names = itertools.count(1)

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.run_as:
            command = ["runuser", "-u", self.run_as, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()}\n{tail}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C", "-N")

    def start(self) -> None:
        options = (f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
                   "-c full_page_writes=off")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, schema: str | None = None, password: str | None = None) -> str:
        """A URL of the cluster's `postgres` database; `schema`: tables go to (and are found in) that schema."""
        user = f"{SUPERUSER}:{password}" if password else SUPERUSER
        path = f"&options=-csearch_path%3D{schema}" if schema else ""
        return f"postgresql://{user}@/postgres?host={self.socket_dir}{path}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def create_schema(self) -> str:
        name = f"store_test_{next(self._names)}"
        self.admin(f"CREATE SCHEMA {name}")
        return name

    def drop_schema(self, name: str) -> None:
        # Sessions a test left open would hold locks on its tables: end them first.
        self.admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   "WHERE application_name = 'tunelab' AND pid <> pg_backend_pid()")
        self.admin(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the PostgreSQL store tests: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'tunelab[postgres]'")
    bindir = _server_bindir()
    if bindir is None:
        _unavailable("the PostgreSQL server is not installed (Debian: apt-get install postgresql)")
    run_as = None
    if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to the postgres system user
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root and there is no `postgres` user to own the cluster")
        if shutil.which("runuser") is None:
            _unavailable("running as root and runuser (util-linux) is missing")
        run_as = "postgres"
    # Not pytest's tmp folder: the postgres user cannot enter root's 0700 pytest folders,
    # and a unix socket path must stay short.
    root = Path(tempfile.mkdtemp(prefix="tunelab-pg-"))
    if run_as:
        os.chown(root, account.pw_uid, account.pw_gid)
    cluster = PgCluster(bindir, root, run_as)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        try:
            cluster.stop("immediate")
        except RuntimeError:
            pass  # never started, or already down
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where a store test keeps its runs: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp_path / "runs.db")
        return
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    schema = cluster.create_schema()
    yield cluster.url(schema)
    cluster.drop_schema(schema)


def raw_connection(url: str) -> Any:
    """A plain connection to a store's database with sqlite3's interface (autocommit)."""
    return store_dialect.open_location(url).connect()


def database_at_version(url: str, version: int) -> Any:
    """A database as an older tunelab left it (only the first `version` migrations), and a
    connection to it with sqlite3's interface for adding old rows (autocommit)."""
    dialect = store_dialect.open_location(url)
    conn = dialect.connect()
    dialect.begin_write(conn)
    store_dialect.migrate(dialect, conn, MIGRATIONS[:version])
    conn.execute("COMMIT")
    return conn
