"""Where the page's "Check dataset" spends its time, on the demo model and alpaca data.

    python bench/dataset_check.py [--repeat N] [--out FILE.json]

Two measurements, side by side in one run:
- `route`: POST /api/datasets/preview (the page's request: the demo model and its alpaca
  file, 5 rows) on a real server, N times in a row, as a user pressing the button again.
  Once with TUNELAB_PREWARM=0 (every preview starts a cold child) and once as `tunelab
  serve` runs (a spare preview child with its imports done waits; see
  tunelab/server/preview_spare.py). The servers are left to go idle before the first press.
- `phases`: a cold child's work, step by step in one fresh process: interpreter and
  tunelab imports, the `datasets` import and reading the file, the `transformers` import
  and loading the tokenizer, rendering the rows; then how long the interpreter takes to
  exit with all that loaded (the server waits for the child's exit, so the child skips it).
Wall seconds on a shared machine move with its load; the ratio of the two servers,
measured in the same run, is the number to read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from server_proc import launch

PHASES = r"""
import json, sys, tempfile, time
from pathlib import Path
t0 = time.perf_counter()
marks = {}
def mark(name):
    marks[name] = round(time.perf_counter() - t0, 3)
from tunelab.worker.preview import child as preview_child
from tunelab.config.run_config import parse_config
mark("python + tunelab imports")
from tunelab.worker.run_config import worker_config
cfg = worker_config(parse_config({"model_name": sys.argv[1], "local_datasets": [sys.argv[2]], "max_steps": 1, "eval_steps": 0}).worker_payload())
import datasets
mark("import datasets")
from tunelab.worker.data.prepare import load_raw
with tempfile.TemporaryDirectory() as cache:
    raw = load_raw(cfg, Path(cache))
    mark("read the file")
    from transformers import AutoTokenizer
    mark("import transformers")
    preview_child._load_tokenizer(cfg.model_name, cfg)
    mark("load the tokenizer")
    preview_child.build_preview(cfg, 5, cfg.model_name, Path(cache))
    mark("whole preview again, all imported")
print(json.dumps({"marks": marks, "ended_at": time.time()}), flush=True)
"""


def press(server, body: dict, repeat: int) -> list[float]:
    seconds = []
    with server.client(timeout=300) as client:
        for _ in range(repeat):
            started = time.perf_counter()
            answer = client.post("/api/datasets/preview", json=body)
            seconds.append(round(time.perf_counter() - started, 3))
            assert answer.status_code == 200 and answer.json()["format"] == "alpaca", answer.text
            time.sleep(1.0)  # a person reads the answer; a spare is made again meanwhile
            server.wait_until_warm()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from tunelab.demos.assets import ensure_demo_assets

    assets = ensure_demo_assets()
    body = {"model_name": str(assets.model_dir), "local_datasets": [str(assets.alpaca)], "rows": 5}
    result = {}
    for name, env in (("cold child each time (TUNELAB_PREWARM=0)", {"TUNELAB_PREWARM": "0"}),
                      ("spare preview child (as tunelab serve)", {})):
        server = launch(env, data_root=assets.root)
        try:
            server.wait_until_warm()
            seconds = press(server, body, args.repeat)
        finally:
            server.stop()
        result[name] = {"seconds": seconds, "median_s": statistics.median(seconds)}
    cold, warm = (r["median_s"] for r in result.values())
    result["ratio cold/spare"] = round(cold / warm, 1)
    done = subprocess.run([sys.executable, "-c", PHASES, str(assets.model_dir), str(assets.alpaca)],
                          capture_output=True, text=True, check=True)
    exited = time.time()
    phases = json.loads(done.stdout.strip().splitlines()[-1])
    result["phases of a cold child (s since its start)"] = phases["marks"]
    result["interpreter teardown after the last phase (s; preview_child skips it with os._exit)"] = round(exited - phases["ended_at"], 3)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
