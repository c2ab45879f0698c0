"""`tunelab export RUN --download` against a real server on loopback: the CLI (a
subprocess, as a user runs it) has the server export the run, downloads the files byte
for byte, and uses that export again next time; a connection the network cuts mid-file,
and a CLI killed mid-file, both end with the right bytes through a Range request for the
rest (or, the file having changed on the server meanwhile, the whole new file), never a
half file under its final name; another member's CLI is refused with the
server's reason and exit 1, writing nothing; without a server it says how to name one.

The runs are written through the real store (a completed LoRA run whose folder holds an
adapter of random bytes: copying an adapter does not read it), so no training is needed;
the export itself is the server's real one. Faults are real: a TCP proxy in front of the
server cuts or stalls the response (fault_proxy.py), and the CLI is killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_proxy import FaultyProxy
from tunelab.keys import new_secret, secret_hash
from tunelab.store import Store

TUNELAB = [sys.executable, "-m", "tunelab.cli.main"]
WEIGHTS = "adapter_model.safetensors"
WEIGHTS_BYTES = 3_000_000
CUT_AFTER = 700_000  # bytes of the weights' response let through before the fault


@pytest.fixture
def lab(start_server, demo_assets, tmp_path):
    """A server with the members alice and bob; alice owns run 1, completed, its folder
    holding an adapter. Yields (server, {name: secret}, run id)."""
    home = tmp_path / "home"
    run_dir = home / "outputs" / "alice-run"
    run_dir.mkdir(parents=True)
    (run_dir / WEIGHTS).write_bytes(os.urandom(WEIGHTS_BYTES))
    (run_dir / "adapter_config.json").write_text('{"r": 8, "lora_alpha": 16}')
    secrets = {}
    with Store(home / "tunelab.db") as store:
        for name in ("alice", "bob"):
            secrets[name] = new_secret()
            store.add_api_key(name, "member", secret_hash(secrets[name]))
        run_id = store.create_run({"model_name": str(demo_assets.model_dir), "max_steps": 3}, "demo", "alpaca",
                                  display_name="alice done", owned_by="alice")
        store.finalize_run(run_id, status="completed", final_step=3, final_loss=1.5, output_dir=str(run_dir))
    yield start_server(home=home), secrets, run_id


def cli(args: list[str], token: str, home: Path, server_url: str | None = None, **popen) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("TUNELAB_TOKEN", "TUNELAB_SERVER")}
    env.update(TUNELAB_HOME=str(home), TUNELAB_TOKEN=token, COLUMNS="200")
    if server_url:
        env["TUNELAB_SERVER"] = server_url
    return subprocess.Popen(TUNELAB + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def run_cli(args: list[str], token: str, home: Path, server_url: str | None = None) -> subprocess.CompletedProcess:
    process = cli(args, token, home, server_url)
    out, err = process.communicate(timeout=180)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def export_folder(server, run_id: int) -> Path:
    exports = server.client().get(f"/api/runs/{run_id}/exports").json()["exports"]
    assert len(exports) == 1, exports
    return Path(exports[0]["folder"])


def same_files(got: Path, want: Path) -> None:
    """`got` holds exactly `want`'s files, byte for byte, and no part file."""
    def files(folder: Path) -> dict[str, bytes]:
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    assert files(got) == files(want)


def test_the_server_exports_the_files_come_byte_for_byte_and_the_export_is_used_again(lab, tmp_path):
    server, secrets, run_id = lab
    to = tmp_path / "here"
    first = run_cli(["export", str(run_id), "--download", "--to", str(to), "--server", server.base_url], secrets["alice"],
                    tmp_path / "cli-home")
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"the server exported run {run_id} as adapter" in first.stdout
    folder = export_folder(server, run_id)
    assert (folder / WEIGHTS).stat().st_size == WEIGHTS_BYTES
    same_files(to, folder)
    # Again, through TUNELAB_SERVER: the server's export is used, the files here kept.
    again = run_cli(["export", str(run_id), "--download", "--to", str(to)], secrets["alice"], tmp_path / "cli-home",
                    server_url=server.base_url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "using the adapter export the server holds" in again.stdout and f"{WEIGHTS} ({WEIGHTS_BYTES} bytes, kept)" in again.stdout
    assert export_folder(server, run_id) == folder
    same_files(to, folder)


def test_a_connection_cut_mid_file_continues_with_a_range_request(lab, tmp_path):
    server, secrets, run_id = lab
    proxy = FaultyProxy(int(server.base_url.rsplit(":", 1)[1]), f"file={WEIGHTS}".encode(), CUT_AFTER, mode="cut")
    to = tmp_path / "here"
    try:
        done = run_cli(["export", str(run_id), "--download", "--to", str(to), "--server", proxy.url], secrets["alice"],
                       tmp_path / "cli-home")
    finally:
        proxy.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert proxy.fired.is_set()
    first, *rest = proxy.ranges_asked()
    assert first == "" and len(rest) == 1, proxy.ranges_asked()
    start = int(rest[0].removeprefix("bytes=").removesuffix("-"))
    assert 0 < start < CUT_AFTER  # from the bytes held, not from the start
    assert f"{WEIGHTS} ({WEIGHTS_BYTES} bytes, resumed)" in done.stdout
    same_files(to, export_folder(server, run_id))


@pytest.mark.parametrize("changed", [False, True], ids=["same-file", "file-changed-meanwhile"])
def test_a_cli_killed_mid_file_leaves_a_part_file_and_the_next_run_finishes_it(lab, tmp_path, changed):
    """And when the file changed on the server in between (exported again), the part's
    ETag no longer matches: the server sends it whole, and no old byte is kept."""
    server, secrets, run_id = lab
    proxy = FaultyProxy(int(server.base_url.rsplit(":", 1)[1]), f"file={WEIGHTS}".encode(), CUT_AFTER, mode="stall")
    to = tmp_path / "here"
    part = to / f"{WEIGHTS}.part"
    try:
        process = cli(["export", str(run_id), "--download", "--to", str(to), "--server", proxy.url], secrets["alice"],
                      tmp_path / "cli-home")
        held = wait_for_still_part(part, process)
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
        assert 0 < part.stat().st_size == held < WEIGHTS_BYTES
        assert not (to / WEIGHTS).exists()  # never a half file under the final name
        if changed:
            (export_folder(server, run_id) / WEIGHTS).write_bytes(os.urandom(WEIGHTS_BYTES))
        # The network is fine again: the next run continues from the bytes held.
        done = run_cli(["export", str(run_id), "--download", "--to", str(to), "--server", proxy.url], secrets["alice"],
                       tmp_path / "cli-home")
    finally:
        proxy.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert proxy.ranges_asked() == ["", f"bytes={held}-"]
    assert f"{WEIGHTS} ({WEIGHTS_BYTES} bytes, {'downloaded' if changed else 'resumed'})" in done.stdout
    assert not part.exists() and not part.with_name(part.name + ".etag").exists()
    same_files(to, export_folder(server, run_id))


def wait_for_still_part(part: Path, process: subprocess.Popen, still_s: float = 1.0, limit_s: float = 120) -> int:
    """The size of `part` once it holds bytes and has stopped growing (the stalled response)."""
    deadline = time.monotonic() + limit_s
    size, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        now = part.stat().st_size if part.exists() else 0
        if now != size:
            size, since = now, time.monotonic()
        elif size > 0 and time.monotonic() - since >= still_s:
            return size
        time.sleep(0.1)
    raise AssertionError(f"{part} never held a still, non-empty part (last size {size})")


def test_another_members_cli_is_refused_and_writes_nothing(lab, tmp_path):
    server, secrets, run_id = lab
    assert run_cli(["export", str(run_id), "--download", "--to", str(tmp_path / "alice"), "--server", server.base_url],
                   secrets["alice"], tmp_path / "cli-home").returncode == 0
    to = tmp_path / "bob"
    for args in (["--to", str(to)], ["--to", str(to), "--dest", "bob-copy"]):  # her export, and a new one
        refused = run_cli(["export", str(run_id), "--download", *args, "--server", server.base_url], secrets["bob"],
                          tmp_path / "cli-home")
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert f"run {run_id} belongs to the key 'alice'" in refused.stderr and "Traceback" not in refused.stderr
        assert not to.exists() or not any(to.rglob("*"))
    assert not (server.home / "outputs" / "bob-copy").exists()


def test_without_a_server_it_says_how_to_name_one(tmp_path):
    home = tmp_path / "lonely-home"
    home.mkdir()
    result = run_cli(["export", "1", "--download"], "any", home)
    assert result.returncode == 2
    assert "--download needs a tunelab server: pass --server URL (or set TUNELAB_SERVER)" in result.stderr
    unreachable = run_cli(["export", "1", "--download", "--server", "http://127.0.0.1:9"], "any", home)
    assert unreachable.returncode == 1 and "did not answer" in unreachable.stderr
    assert "Traceback" not in result.stderr + unreachable.stderr
