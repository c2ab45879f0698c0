"""A stand-in for the Hugging Face Hub's HTTP API on a loopback port, for the push tests.

It answers just the calls huggingface_hub's `whoami`, `create_repo`, `delete_repo` and
`create_commit` make (read from huggingface_hub's own source: hf_api.py, _commit_api.py,
lfs.py): /api/whoami-v2, /api/repos/create, /api/repos/delete, /api/validate-yaml, the
preupload and commit routes, and the git-LFS batch API with its upload and verify
actions. Clients reach it through HF_ENDPOINT; HF_HUB_DISABLE_XET=1 makes them upload
large files by the LFS protocol, which this stand-in speaks, instead of Xet's storage
service, which it does not. Like the Hub, it applies a commit whole or not at all, and
answers LFS for weights and images, plain base64 for the rest.

The test reads what arrived (`repos`, `requests`) and causes faults by setting
`fail_commits` (the next commits get that status).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import uvicorn
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".png", ".pt")


@dataclass
class Account:
    name: str
    orgs: list[str] = field(default_factory=list)
    role: str = "write"


@dataclass
class Repo:
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    commits: list[str] = field(default_factory=list)


class HubStandIn:
    def __init__(self, accounts: dict[str, Account]):
        self.accounts = accounts  # token -> account
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}  # LFS objects by sha256, uploaded before a commit names them
        self.requests: list[tuple[str, str]] = []
        self.fail_commits: int | None = None
        self.lock = threading.Lock()
        self.app = self._build()
        self.url = ""
        self._server: uvicorn.Server | None = None

    # -- running ---------------------------------------------------------------------------
    def start(self) -> "HubStandIn":
        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        threading.Thread(target=self._server.run, daemon=True).start()
        deadline = time.monotonic() + 20
        while not (self._server.started and self._server.servers):
            if time.monotonic() > deadline:
                raise RuntimeError("the Hub stand-in did not start")
            time.sleep(0.02)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True

    def env(self) -> dict[str, str]:
        """What a client process needs to talk to this stand-in and nothing else."""
        return {"HF_ENDPOINT": self.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0"}

    # -- the API ---------------------------------------------------------------------------
    def _account(self, request: Request) -> Account | None:
        header = request.headers.get("authorization", "")
        return self.accounts.get(header[7:]) if header.startswith("Bearer ") else None

    def _may_write(self, account: Account | None, repo_id: str) -> JSONResponse | None:
        if account is None:
            return _error(401, "Invalid credentials in Authorization header")
        if account.role != "write":
            return _error(403, "This token has no write access")
        if repo_id.split("/")[0] not in (account.name, *account.orgs):
            return _error(403, f"You don't have the rights to create a model under the namespace {repo_id.split('/')[0]!r}")
        return None

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def record(request: Request, call_next):
            with self.lock:
                self.requests.append((request.method, request.url.path))
            return await call_next(request)

        @app.get("/api/whoami-v2")
        def whoami(request: Request):
            account = self._account(request)
            if account is None:
                return _error(401, "Invalid credentials in Authorization header")
            return {"type": "user", "name": account.name, "orgs": [{"name": o} for o in account.orgs],
                    "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": account.role}}}

        @app.post("/api/repos/create")
        async def create(request: Request):
            body = await request.json()
            account = self._account(request)
            repo_id = f"{body.get('organization') or (account.name if account else '')}/{body['name']}"
            refused = self._may_write(account, repo_id)
            if refused:
                return refused
            with self.lock:
                if repo_id in self.repos:
                    return _error(409, "You already created this model repo", url=f"{self.url}/{repo_id}")
                self.repos[repo_id] = Repo(private=body.get("visibility") == "private")
            return {"url": f"{self.url}/{repo_id}", "name": repo_id, "id": uuid.uuid4().hex}

        @app.delete("/api/repos/delete")
        async def delete(request: Request):
            body = await request.json()
            repo_id = f"{body['organization']}/{body['name']}"
            refused = self._may_write(self._account(request), repo_id)
            if refused:
                return refused
            with self.lock:
                if self.repos.pop(repo_id, None) is None:
                    return _error(404, "Repository not found", code="RepoNotFound")
            return Response(status_code=200)

        @app.post("/api/validate-yaml")
        async def validate_yaml(request: Request):
            content = (await request.json())["content"]
            if content.startswith("---\n"):
                try:
                    meta = yaml.safe_load(content[4:].split("\n---\n", 1)[0])
                except yaml.YAMLError as exc:
                    return JSONResponse({"errors": [{"message": str(exc)}], "warnings": []}, status_code=400)
                if not isinstance(meta, dict):
                    return JSONResponse({"errors": [{"message": "metadata must be a mapping"}], "warnings": []}, status_code=400)
            return {"errors": [], "warnings": []}

        @app.post("/api/models/{owner}/{name}/preupload/{revision}")
        async def preupload(owner: str, name: str, revision: str, request: Request):
            repo_id = f"{owner}/{name}"
            refused = self._may_write(self._account(request), repo_id) or self._missing(repo_id)
            if refused:
                return refused
            files = (await request.json())["files"]
            return {"files": [{"path": f["path"], "shouldIgnore": False, "oid": None,
                               "uploadMode": "lfs" if f["path"].endswith(LFS_SUFFIXES) else "regular"} for f in files]}

        @app.post("/{owner}/{repo}.git/info/lfs/objects/batch")
        async def lfs_batch(owner: str, repo: str, request: Request):
            repo_id = f"{owner}/{repo}"
            refused = self._may_write(self._account(request), repo_id) or self._missing(repo_id)
            if refused:
                return refused
            objects = []
            for obj in (await request.json())["objects"]:
                answer = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
                if obj["oid"] not in self.blobs:
                    answer["actions"] = {"upload": {"href": f"{self.url}/lfs-upload/{obj['oid']}"},
                                         "verify": {"href": f"{self.url}/lfs-verify"}}
                objects.append(answer)
            return {"transfer": "basic", "objects": objects}

        @app.put("/lfs-upload/{oid}")
        async def lfs_upload(oid: str, request: Request):
            data = await request.body()
            if hashlib.sha256(data).hexdigest() != oid:
                return _error(400, "the uploaded bytes do not match their sha256")
            with self.lock:
                self.blobs[oid] = data
            return Response(status_code=200)

        @app.post("/lfs-verify")
        async def lfs_verify(request: Request):
            body = await request.json()
            if self._account(request) is None:
                return _error(401, "Invalid credentials in Authorization header")
            if len(self.blobs.get(body["oid"], b"")) != body["size"]:
                return _error(404, "object not uploaded")
            return {}

        @app.post("/api/models/{owner}/{name}/commit/{revision}")
        async def commit(owner: str, name: str, revision: str, request: Request):
            repo_id = f"{owner}/{name}"
            refused = self._may_write(self._account(request), repo_id) or self._missing(repo_id)
            if refused:
                return refused
            if self.fail_commits is not None:
                return _error(self.fail_commits, "the commit was refused (a fault the test caused)")
            new: dict[str, bytes] = {}
            for line in (await request.body()).splitlines():
                item = json.loads(line)
                value = item["value"]
                if item["key"] == "file":
                    new[value["path"]] = base64.b64decode(value["content"])
                elif item["key"] == "lfsFile":
                    if value["oid"] not in self.blobs:
                        return _error(422, f"LFS object {value['oid']} of {value['path']} was never uploaded")
                    new[value["path"]] = self.blobs[value["oid"]]
                elif item["key"] != "header":
                    return _error(400, f"the stand-in does not take {item['key']} operations")
            oid = uuid.uuid4().hex + "00000000"
            with self.lock:  # all of it, or nothing
                self.repos[repo_id].files.update(new)
                self.repos[repo_id].commits.append(oid)
            return {"commitUrl": f"{self.url}/{repo_id}/commit/{oid}", "commitOid": oid}

        return app

    def _missing(self, repo_id: str) -> JSONResponse | None:
        return None if repo_id in self.repos else _error(404, "Repository not found", code="RepoNotFound")


def _error(status: int, message: str, code: str | None = None, **more: Any) -> JSONResponse:
    headers = {"X-Error-Message": message, **({"X-Error-Code": code} if code else {})}
    return JSONResponse({"error": message, **more}, status_code=status, headers=headers)
