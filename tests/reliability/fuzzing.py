"""Bad input at the HTTP surface, shared by the suite (few examples per route) and
bench/reliability.py (many): schemathesis (`st run`) fuzzing every route with the token,
a sweep sending every route wrong credentials, and one sending API keys that must not
get through: a revoked key, and keys whose role (or ownership) does not allow the route.

Checks: every one schemathesis has except `positive_data_acceptance`, which expects
any body the schema allows to be accepted — tunelab also enforces rules across fields
that OpenAPI cannot express (a run needs one data source; warmup_steps or warmup_ratio,
not both; a name without control characters), so a schema-valid body may rightly get a
422. Excluded route: GET /api/train/progress, the Server-Sent Events stream, whose body
never ends while the server lives (its errors are tested in tests/server).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
EXCLUDED_CHECKS = "positive_data_acceptance"
EXCLUDED_OPERATION = "GET /api/train/progress"


@dataclass
class FuzzResult:
    command: str
    returncode: int
    cases: int
    output: str


def st_command(base_url: str, max_examples: int, seed: int, phases: str | None = None) -> list[str]:
    st = str(Path(sys.executable).with_name("st"))
    return [st, "run", *(["--phases", phases] if phases else []), f"{base_url}/openapi.json", "--header", "Authorization: Bearer ${TOKEN}",
            "--checks", "all", "--exclude-checks", EXCLUDED_CHECKS,
            "--exclude-path", "/api/train/progress", "--max-examples", str(max_examples), "--seed", str(seed),
            "--workers", "1", "--request-timeout", "60", "--generation-database", "none"]


def run_schemathesis(server: Any, assets: Any, known_runs: int, max_examples: int, seed: int,
                     workdir: Path, phases: str | None = None) -> FuzzResult:
    """Fuzz `server` (whose runs use a fake worker); `known_runs` run ids 1..N exist.
    `phases`: schemathesis's phases to run (None: all of them)."""
    shown = " ".join(st_command("http://127.0.0.1:${PORT}", max_examples, seed, phases)).replace(f"{HERE.parents[1]}/", "")
    command = [part.replace("${TOKEN}", server.token) for part in st_command(server.base_url, max_examples, seed, phases)]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "fuzz_hooks", "FUZZ_MODEL_DIR": str(assets.model_dir),
           "FUZZ_TRAIN_FILE": str(assets.alpaca), "FUZZ_RUN_IDS": str(known_runs),
           "FUZZ_BASE_URL": server.base_url, "FUZZ_TOKEN": server.token,
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    workdir.mkdir(parents=True, exist_ok=True)  # schemathesis keeps replay files in its working folder
    result = subprocess.run(command, env=env, cwd=workdir, capture_output=True, text=True, timeout=1800)
    output = result.stdout + result.stderr
    match = re.search(r"(\d+) generated", output)
    return FuzzResult(shown, result.returncode, int(match.group(1)) if match else 0, output)


# --- the token ----------------------------------------------------------------------------
WRONG_CREDENTIALS = {
    "no token": {},
    "wrong token": {"Authorization": "Bearer not-the-token"},
    "right token, wrong scheme": {"Authorization": "Basic ${TOKEN}"},
    "token with a suffix": {"Authorization": "Bearer ${TOKEN}x"},
}


@dataclass
class AuthSweep:
    operations: int  # documented operations that need the token
    requests: int
    not_refused: list[str]  # "METHOD path (credentials): status" for anything but a 401
    history_changed: bool


def requests_that_would_succeed(server: Any, make_body: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """One request per documented operation, valid in every way but the token."""
    schema = httpx.get(server.base_url + "/openapi.json").json()
    bodies = {
        ("post", "/api/train/start"): make_body(max_steps=1),
        ("post", "/api/train/stop"): {"save": False},
        ("patch", "/api/runs/{run_id}"): {"display_name": "renamed"},
        ("post", "/api/datasets/preview"): {"local_datasets": make_body()["local_datasets"]},
    }
    return [(method.upper(), path.format(run_id=1, sweep_id=1, name="step-1.wav"), bodies.get((method, path), {}))
            for path, operations in schema["paths"].items() for method in operations]


def sweep_auth(server: Any, make_body: Any) -> AuthSweep:
    """Every operation but health, with every kind of wrong credentials; afterwards the
    run history must be exactly as before (nothing started, renamed, resumed, deleted)."""
    not_refused, sent, operations = [], 0, 0
    with httpx.Client(base_url=server.base_url, timeout=30) as anonymous, server.client() as client:
        before = client.get("/api/runs").json()
        for method, path, body in requests_that_would_succeed(server, make_body):
            if path == "/api/health":
                continue
            operations += 1
            for name, headers in WRONG_CREDENTIALS.items():
                headers = {k: v.replace("${TOKEN}", server.token) for k, v in headers.items()}
                response = anonymous.request(method, path, json=body, headers=headers,
                                             params={"token": "not-the-token", "delete_artifacts": "true"})
                sent += 1
                if response.status_code != 401 or response.json()["error"]["code"] != "unauthorized":
                    not_refused.append(f"{method} {path} ({name}): {response.status_code}")
        after = client.get("/api/runs").json()
    return AuthSweep(operations, sent, not_refused, after != before)


# --- API keys ---------------------------------------------------------------------------
@dataclass
class KeySweep:
    operations: int  # documented operations but health
    revoked_requests: int  # each sent with a revoked key: must be 401
    role_requests: int  # sent by a viewer, or a member to runs it does not own: must be 403
    not_refused: list[str]  # "METHOD path (caller): status" for anything else
    history_changed: bool
    secrets_in_database: int  # key secrets found in the database files (with -wal/-shm)


def _make_keys(home: Path) -> dict[str, str]:
    """A revoked member key, a viewer key and a member key in the live server's store; the
    server reads keys per request, so they count at once."""
    from tunelab.keys import new_secret, secret_hash
    from tunelab.store import Store

    secrets = {name: new_secret() for name in ("revoked", "viewer", "member")}
    with Store(home / "tunelab.db") as store:
        for name, secret in secrets.items():
            store.add_api_key(f"sweep-{name}", "viewer" if name == "viewer" else "member", secret_hash(secret))
        store.revoke_api_key("sweep-revoked")
    return secrets


def sweep_keys(server: Any, make_body: Any) -> KeySweep:
    """Every operation but health with a revoked key (401); every operation a viewer may
    not use, with the viewer's key, and every one that acts on a run, with a member key
    that does not own the runs (started with the token) — 403 naming the rule. The run
    history must be exactly as before, and no secret may lie in the database files."""
    from tunelab.server.roles import OWN_ACTIVE, OWN_RUN, PUBLIC, READ, rule_for

    secrets = _make_keys(server.home)
    not_refused, revoked_sent, role_sent, operations = [], 0, 0, 0
    clients = {caller: server.client(token=secret) for caller, secret in secrets.items()}
    with server.client() as admin:
        before = admin.get("/api/runs").json()
        for method, path, body in requests_that_would_succeed(server, make_body):
            rule, _ = rule_for(method, path)
            if rule == PUBLIC:
                continue
            operations += 1
            wrong = [("revoked", 401)]
            if rule != READ:
                wrong.append(("viewer", 403))
            if rule in (OWN_RUN, OWN_ACTIVE):
                wrong.append(("member", 403))
            for caller, expected in wrong:
                response = clients[caller].request(method, path, json=body, params={"delete_artifacts": "true"})
                revoked_sent += caller == "revoked"
                role_sent += caller != "revoked"
                if response.status_code != expected:
                    not_refused.append(f"{method} {path} ({caller} key): {response.status_code}")
        after = admin.get("/api/runs").json()
    for client in clients.values():
        client.close()
    on_disk = b"".join(p.read_bytes() for p in server.home.glob("tunelab.db*"))
    found = sum(secret.encode() in on_disk for secret in secrets.values())
    return KeySweep(operations, revoked_sent, role_sent, not_refused, after != before, found)
