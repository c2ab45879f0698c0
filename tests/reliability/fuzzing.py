"""Bad input at the HTTP surface, shared by the suite (few examples per route) and
bench/reliability.py (many): schemathesis (`st run`) fuzzing every route with the token,
and a sweep sending every route wrong credentials.

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
    return [(method.upper(), path.format(run_id=1), bodies.get((method, path), {}))
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
