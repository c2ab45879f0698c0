"""docs/RELIABILITY.md from the figures bench/reliability.py measured: one section per
fault or check, each figure next to the commands that reproduce it (the full-size
section of the bench, and the suite's small version of it)."""

from __future__ import annotations

from typing import Any

SCRIPT = ".venv/bin/python bench/reliability.py --only"
SUITE = ".venv/bin/python -m pytest -q tests/reliability/"


def _s(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _reproduce(section: str, test: str, extra: str = "") -> list[str]:
    return ["", f"Reproduce: `{SCRIPT} {section}{extra}` (full size) · `{SUITE}{test}` (suite)", ""]


def _missing(name: str) -> list[str]:
    return [f"_Not measured yet: run `{SCRIPT} {name}`._", ""]


def worker_kills(f: dict[str, Any]) -> list[str]:
    lines = [f"{f['trials']} runs of the real worker (demo Llama, LoRA, save_steps=2, prewarmed as `tunelab serve` "
             f"runs it), each killed with SIGKILL at a random moment (seed {f['seed']}) aimed at one stage, "
             f"{f['trials'] // 5} per stage. Where a kill landed is read from the worker's own timestamps.", "",
             "| aimed at | trials | landed in | final status | slowest kill → stored end | half-written checkpoint "
             "left | resumable |", "|---|---|---|---|---|---|---|"]
    for stage, s in f["by_stage"].items():
        statuses = ", ".join(f"{n} {k}" for k, n in s["statuses"].items())
        landed = ", ".join(f"{n} {k}" for k, n in s["landed"].items())
        lines.append(f"| {stage} | {s['trials']} | {landed} | {statuses} | {_s(s['max_kill_to_end_s'])} s | "
                     f"{s['partial_checkpoints_left']} | {s['resumable']} |")
    lines += ["", f"- runs that reached a final state: **{f['terminal']} of {f['trials']}**; kill → stored end: "
              f"median {_s(f['median_kill_to_end_s'])} s, slowest **{_s(f['max_kill_to_end_s'])} s** (limit 10 s)",
              f"- steps the server streamed: {f['streamed_steps']}; streamed but not stored: **{f['streamed_not_stored']}**",
              f"- worker processes left behind: **{f['leftover_processes']}**",
              f"- killed runs offered for resume exactly when a valid checkpoint survived: "
              f"{f['resume_matches_checkpoint']} of {f['errors']} (a half-written checkpoint is never offered)",
              "- a kill aimed at the final save can land after the worker already sent `complete`; the run is then "
              "recorded `completed`, which is what happened"]
    if f["failed_trials"]:
        lines.append(f"- trials that could not be run as planned: {f['failed_trials']}")
    return lines + _reproduce("worker-kills", "test_worker_kills.py")


def wedged(f: dict[str, Any]) -> list[str]:
    caps = ", ".join(f"{k}={v}" for k, v in f["caps"].items())
    lines = [f"Scripted workers that will not end, on a live server with shortened watchdog caps ({caps}).", "",
             "| worker | recorded status | resume blocked | can resume | request → stored end | worker gone |",
             "|---|---|---|---|---|---|"]
    for name, c in f["cases"].items():
        lines.append(f"| {name} | {c['status']} | {c['resume_blocked']} | {c['can_resume']} | "
                     f"{_s(c['seconds_to_end'], 1)} s | {c['worker_gone'] and not c['leftovers']} |")
    lines += ["", "A stop-and-save that never produced a checkpoint ends `error` with resume blocked; a cancel ends "
              "`stopped` and keeps nothing (its folder is removed when inside the outputs root and unshared); the time is the cap plus the 3 s between SIGTERM and SIGKILL."]
    return lines + _reproduce("wedged", "test_wedged_workers.py")


def server_kill(f: dict[str, Any]) -> list[str]:
    lines = ["The server killed with SIGKILL during a real run (save_steps=2), then started again on the same home.", "",
             "| last step the server saw | worker gone after | all its processes gone after | after restart | "
             "latest valid checkpoint | resumed at step |",
             "|---|---|---|---|---|---|"]
    for t in f["trials"]:
        lines.append(f"| {t['killed_at_step']} | {_s(t['worker_exit_s'])} s | {_s(t['all_exit_s'])} s | "
                     f"{t['status_after_restart']} (\"{t['message']}\"), can resume: {t['can_resume']} | "
                     f"checkpoint-{t['checkpoint_step']} | {t['resumed_first_step']} |")
    lines += ["", f"- slowest worker exit after its server died: **{_s(f['max_worker_exit_s'])} s** (limit 5 s; the "
              f"worker polls its parent id every second); workers that outlived their server: "
              f"**{f['workers_outliving_server']}**",
              "- resuming continues the step count at the checkpoint's step + 1. Until it notices, the orphaned worker "
              "trains on (the tiny model does ~50 steps/s), so its last checkpoint can be ahead of the last step the "
              "server stored; those steps' metrics died with the server"]
    return lines + _reproduce("server-kill", "test_server_kill.py")


def preemption(f: dict[str, Any]) -> list[str]:
    lines = ["SIGTERM (what docker stop, systemd, Kubernetes and Slurm send) to `tunelab serve` and to `tunelab train` "
             "during a real run (demo Llama, LoRA, no periodic checkpoints: the only checkpoint is the one the stop "
             "writes). Time is from the signal to the run's end stored in the database, and to the process's exit.", "",
             "| process | step at the signal | stored | checkpoint | steps lost | signal → stored | signal → exit | "
             "exit code |",
             "|---|---|---|---|---|---|---|---|"]
    for name, trials in (("tunelab serve", f["serve"]), ("tunelab train", f["train"])):
        for t in trials:
            lines.append(f"| {name} | {t['step_at_signal']} | {t['status']} at step {t['final_step']} | "
                         f"checkpoint-{t['checkpoint_step']} | {t['steps_lost']} | {_s(t['signal_to_stored_s'])} s | "
                         f"{_s(t['signal_to_exit_s'])} s | {t['exit_code']} |")
    first = f["serve"][0] if f["serve"] else {}
    lines += ["", f"- steps lost over all trials: **{f['steps_lost']}**; every run recorded `stopped`: "
              f"**{f['all_stopped']}**; slowest signal → stored: **{_s(f['max_signal_to_stored_s'])} s**, "
              f"→ exit: **{_s(f['max_signal_to_exit_s'])} s** (grace: 20 s, `TUNELAB_SHUTDOWN_GRACE_S`)",
              f"- after a restart, resuming the first server trial's run continued at step "
              f"{(first.get('resumed_steps') or ['n/a'])[0]} (no gap, no duplicate: {first.get('resume_joins_without_gap')})",
              "- `tunelab train`'s step at the signal is the last step stored before it, a lower bound; the CLI "
              "exits 130 after a completed stop-and-save, the server 0",
              "- a run that cannot save within the grace is ended and recorded `error`, resumable from its last valid "
              "checkpoint; a second signal cancels; with steps slower than the 2 s metric flush interval a SIGKILL "
              "loses no step older than the interval (suite: `test_preemption.py`). Supervisor settings: "
              "[DEPLOY.md](DEPLOY.md)"]
    return lines + _reproduce("preemption", "test_preemption.py")


def database_lock(f: dict[str, Any]) -> list[str]:
    lines = ["Another process holds the run database's write lock (`BEGIN EXCLUSIVE`) once during training and again "
             "while the run finalizes (scripted worker, 60 steps at 20 steps/s).", "",
             "| lock held | run | steps stored | steps applied while locked | status answers while locked (slowest) | "
             "finalize waited | slowest status while finalizing |", "|---|---|---|---|---|---|---|"]
    for held, c in f.items():
        if not isinstance(c, dict):
            continue
        lines.append(f"| {held} | {c['status']} | {c['steps_stored']}/{c['steps_expected']} | "
                     f"{c['steps_applied_while_locked']} | {c['status_answers_while_locked']} "
                     f"({_s(c['slowest_status_s'], 3)} s) | {_s(c['finalize_wait_s'], 1)} s | "
                     f"{_s(c.get('slowest_status_at_finalize_s'), 1)} s |")
    lines += ["", "During training, metric writes wait for the lock on their own thread, so the live stream and status "
              "requests are not held up; a lock longer than the store's 10 s retry window only delays the writes (the "
              "batch goes back and is written later). Finalizing retries until the lock is gone — and while it "
              "waits, status requests wait with it (the run's state is updated together with its stored end)."]
    return lines + _reproduce("database-lock", "test_database_lock.py")


def disk(f: dict[str, Any]) -> list[str]:
    lines = ["The real worker writing into an output folder that cannot take it.", "",
             "| fault | made by | run | error shown |", "|---|---|---|---|"]
    for name, c in f.items():
        if isinstance(c, dict):
            lines.append(f"| {name} | {c['how']} | {c['status']} | `{c['message']}` |")
    return lines + _reproduce("disk", "test_disk_trouble.py")


def garbage(f: dict[str, Any]) -> list[str]:
    return [f"A scripted worker sends {f['garbage_sent']} malformed messages between its real steps: objects that "
            "are no valid event, and raw frames on the queue's pipe that do not unpickle (truncated, wrong protocol, "
            "text, empty).", "",
            f"- skipped by the pump: **{f['skipped']} of {f['garbage_sent']}**; run: **{f['status']}**",
            f"- real steps streamed {f['steps_streamed']}, stored **{f['steps_stored']} of {f['steps_expected']}**",
            ] + _reproduce("garbage", "test_garbage_events.py")


def fuzz(f: dict[str, Any]) -> list[str]:
    verdict = "no failures" if f["returncode"] == 0 else "FAILURES (see bench/out/reliability.json)"
    return [f"schemathesis {f.get('version', '')} against `/openapi.json` of a live server, every route with the token, "
            "all checks but `positive_data_acceptance` (tunelab enforces rules across fields that OpenAPI cannot "
            "express, so a schema-valid body may rightly get a 422). Half the schema-valid start bodies are repaired "
            "(demo model and data, fields RunConfig refuses dropped) and half the run ids point at existing runs, so "
            "fuzzing reaches the orchestrator; runs use a worker that finishes at once. Excluded: "
            "`GET /api/train/progress`, the SSE stream, whose body never ends.", "",
            f"- test cases: **{f['cases']}** (max {f['max_examples']} examples per route and phase, seed {f['seed']}), "
            f"{_s(f['seconds'], 0)} s: **{verdict}** — no 5xx, no status code, content type, header or body outside "
            f"the schema",
            f"- runs actually started by fuzzed requests: {f['runs_started_by_fuzzing']}; tracebacks in the server "
            f"log: **{f['tracebacks_in_server_log']}**",
            "", f"Command: `{f['command']}`"] + _reproduce("fuzz", "test_api_fuzz.py")


def path_attacks(f: dict[str, Any]) -> list[str]:
    by_field = ", ".join(f"{k} {v}" for k, v in f["by_field"].items())
    d = f["delete"]
    return ["`..` traversal, absolute paths, `~`, `file://` URLs, NUL bytes, symlinks planted inside the managed "
            "folders, and hub-id-shaped names (plus `json`, the datasets file reader) that exist in the server's "
            "working folder — all pointing at canary files outside, in every field that can name a local path, sent "
            "to the start and dataset-preview routes; the server's worker reads (and writes) every path it is given, "
            "so anything let through would show.", "",
            f"- attempts: **{f['attempts']}** ({by_field}); refused with a 4xx naming the field: "
            f"**{f['refused_naming_the_field']}**; runs started: {f['runs_started_by_attacks']}",
            f"- delete-with-artifacts of a run whose folder was swapped for a link outside: {d['swapped_status']} "
            f"naming `{d['swapped_error_field']}`, run kept: {d['swapped_run_kept']}; of a run whose folder holds "
            f"links outside: {d['linked_status']}, folder removed: {d['linked_folder_removed']}, link targets kept",
            f"- canary files read, changed or removed (content, mtime, atime): **{len(f['canary_changes'])}**; reads "
            f"recorded by this filesystem: {f['atime_tracked']}",
            ] + _reproduce("path-attacks", "test_path_attacks.py")


def secrets(f: dict[str, Any]) -> list[str]:
    lines = ["Runs with `hf_token`, `wandb_token` and S3 keys set, read back through every route while running and "
             "after; the server logs at debug level. Places searched: the database files (with -wal/-shm), the "
             "server log, every API response, the progress stream, the stored config, both plot PNGs and the run's "
             "output folder.", "", "| run | status | places with a secret |", "|---|---|---|"]
    for name, c in f.items():
        if isinstance(c, dict):
            leaked = [place for place, names in c["leaks"].items() if names]
            lines.append(f"| {name} | {c['status']} | {', '.join(leaked) or 'none'} (of {len(c['leaks'])}) |")
    return lines + _reproduce("secrets", "test_secrets.py")


def auth(f: dict[str, Any]) -> list[str]:
    return ["Every documented route but health, each with a request that would succeed with the token, sent with no "
            "token, a wrong one, the right one under the wrong scheme, and the right one with a suffix.", "",
            f"- routes: {f['operations']}; requests: {f['requests']}; answered anything but 401: "
            f"**{len(f['not_refused'])}**; run history changed by them: **{f['history_changed']}**",
            ] + _keys(f.get("keys")) + _reproduce("auth", "test_api_fuzz.py")


def _keys(k: dict[str, Any] | None) -> list[str]:
    if not k:
        return []
    return ["", "API keys (`tunelab keys`), created in the live server's store: a revoked key on every route but health; "
                "a viewer key on every route that changes anything or starts work; a member key on every route acting "
                "on a run it does not own (the runs were started with the token).", "",
            f"- revoked key: {k['revoked_requests']} requests; wrong role or owner: {k['role_requests']} requests; "
            f"answered anything but 401 / 403: **{len(k['not_refused'])}**; run history changed: **{k['history_changed']}**",
            f"- key secrets found in the database files (with -wal/-shm): **{k['secrets_in_database']}** "
            "(only their SHA-256 is stored)"]


def load(f: dict[str, Any]) -> list[str]:
    return [f"{f['clients']} progress-stream clients and {f['pollers']} status pollers (one request each 0.2 s) on "
            f"one server during a run of {f['steps']} steps ({1 / f['step_seconds']:.0f} steps/s, scripted worker); "
            "clients subscribe before the run starts. Latency: from the step's event in the worker (its timestamp) "
            "to its arrival at a client, all on this machine.", "",
            f"- clients that received every step, in order, exactly once, then the run's end: "
            f"**{f['clients_with_every_step_in_order_once']} of {f['clients']}** ({f['deliveries']} deliveries)",
            f"- latency p50 **{_s(f['latency_p50_ms'], 1)} ms**, p99 **{_s(f['latency_p99_ms'], 1)} ms**, "
            f"max {_s(f['latency_max_ms'], 1)} ms",
            f"- status polls: {f['polls']}, failed: {f['poll_failures']}",
            f"- server memory (RSS): {_s(f['rss_before_mb'], 0)} MB before, peak {_s(f['rss_peak_mb'], 0)} MB, "
            f"{_s(f['rss_end_mb'], 0)} MB at the end",
            ] + _reproduce("load", "test_sse_load.py", f" --clients {f['clients']} --pollers {f['pollers']}")


SECTIONS = [
    ("Worker killed at random moments", "worker-kills", worker_kills),
    ("Wedged workers", "wedged", wedged),
    ("Server killed during a run", "server-kill", server_kill),
    ("Preemption: SIGTERM during a run", "preemption", preemption),
    ("Database locked by another process", "database-lock", database_lock),
    ("Disk trouble", "disk", disk),
    ("Garbage events", "garbage", garbage),
    ("Fuzzing the API", "fuzz", fuzz),
    ("Path attacks", "path-attacks", path_attacks),
    ("Secrets", "secrets", secrets),
    ("Authentication", "auth", auth),
    ("Load: a crowd on the progress stream", "load", load),
]


FOUND_AND_FIXED = [
    "One malformed message could cut off the rest of a run: `multiprocessing.Queue.get` raises EOFError both for a "
    "closed pipe and for a frame that unpickles to \"ran out of input\", so the pump took garbage for the end of the "
    "stream and dropped everything after it (the run ended `error`). The pump now reads a frame and unpickles it in "
    "two steps (`tunelab/orchestrator/pump.py`).",
    "A progress event with a step or count too large for SQLite (e.g. 2**70) poisoned the metric buffer: every later "
    "flush failed, and so did finalizing, leaving the run `running` until the next start-up. Such events are now "
    "malformed, such counts unknown (`tunelab/events.py`).",
    "While another process locked the database, the pump waited in the metric write while holding the run's lock: "
    "the live stream stalled and status requests hung for the length of the lock. Metric batches are now written on "
    "the buffer's own thread (`tunelab/orchestrator/metric_buffer.py`, `tunelab/orchestrator/run.py`).",
    "A full disk surfaced as `RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos ...`, a "
    "read-only one as a bare `OSError`. Failures caused by the output folder now read `output_dir: ...` with the "
    "folder, the cause and the fix (`tunelab/worker/output_checks.py`).",
    "A path with a NUL character made the start and preview routes answer 500; `paths.check_usable` now refuses it "
    "(and file names this system cannot store) with a 422 naming the field. Whether a model name is a local folder "
    "is now decided in `paths.check_model_source`, next to every other path decision.",
    "The malformed-event log line quoted the event, secrets included; it is now redacted like every other text "
    "from a worker (`tunelab/orchestrator/run.py`).",
    "Schema violations found by fuzzing: a 405 named only some of the path's methods in `Allow`; a body that is not "
    "UTF-8 got an undocumented 400 (now a 422 naming `body`); resume's 400 was undocumented "
    "(`tunelab/server/errors.py`, `tunelab/server/routes_runs.py`).",
]


def render(figures: dict[str, Any]) -> str:
    m = figures.get("machine", {})
    lines = ["# Reliability and security", "",
             "What tunelab survives, measured by causing each fault for real against live servers "
             "(`python -m tunelab.server` on a loopback port, real child processes, a real SQLite file). "
             f"Measured on {m.get('date', '?')}: {m.get('cpus', '?')} CPU cores, no GPU, Python {m.get('python', '?')}, "
             f"{'as root' if m.get('root') else 'as a normal user'}. Everything at once: "
             "`.venv/bin/python bench/reliability.py` (writes this file and `bench/out/reliability.json`); the small "
             "version of each check runs in CI: `.venv/bin/python -m pytest tests/reliability`.", ""]
    for title, name, section in SECTIONS:
        lines += [f"## {title}", ""]
        lines += section(figures[name]) if name in figures else _missing(name)
    lines += ["## Found by these checks, and fixed", ""] + [f"- {item}" for item in FOUND_AND_FIXED]
    return "\n".join(lines).rstrip() + "\n"
