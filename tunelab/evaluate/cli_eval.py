"""`tunelab eval RUN`: evaluate a run in the terminal, or `--show` what was stored.

Progress goes to stderr, the results to stdout (text, or JSON with `--json`: the stored
records, as `GET /api/runs/{id}/evals` returns them). Exit codes as everywhere: 2 for an
option to fix (named as the option it is), 1 for a run that cannot be evaluated.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from tunelab.exit_codes import EXIT_BAD_CONFIG, EXIT_ERROR, EXIT_OK

# EvalOptions fields whose CLI option has another name.
OPTION_NAMES = {"prompts_file": "--prompts"}


def _option(field: str) -> str:
    from tunelab.evaluate.runner import EvalOptions

    if field not in EvalOptions.model_fields:
        return f"the run's setting {field}"  # the child found its stored config at fault (a data file gone)
    return OPTION_NAMES.get(field, "--" + field.replace("_", "-"))


def eval_command(run_id: int, options: dict[str, Any], show: bool, as_json: bool, console: Console,
                 fail: Callable[[int, str], Exception]) -> int:
    from tunelab.store.evals import list_evals
    from tunelab.evaluate.report import render
    from tunelab.evaluate.runner import EvalError, EvalInputError, EvalOptions, run_eval
    from tunelab.store import RunNotFound, Store

    with Store() as store:
        if show:
            try:
                records = list(reversed(list_evals(store, run_id)))
            except RunNotFound:
                raise fail(EXIT_ERROR, f"there is no run {run_id}; list runs with `tunelab runs`") from None
        else:
            try:
                chosen = EvalOptions(**options)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise fail(EXIT_BAD_CONFIG, f"{_option(str(first['loc'][0])) if first['loc'] else 'options'}: {first['msg']}") from None

            def progress(message: str) -> None:
                sys.stderr.write(message + "…\n")
                sys.stderr.flush()

            try:
                records = run_eval(store, run_id, chosen, progress, confined=False)
            except EvalInputError as exc:
                raise fail(EXIT_BAD_CONFIG, f"{_option(exc.field)}: {exc}") from None
            except EvalError as exc:
                raise fail(EXIT_ERROR, str(exc)) from None
    if as_json:
        sys.stdout.write(json.dumps(records, indent=2) + "\n")
    elif records:
        console.print(Text(render(records)))
        console.print(f"stored with run {run_id}: `tunelab eval {run_id} --show`, GET /api/runs/{run_id}/evals, or the History on the page")
    else:
        console.print(f"run {run_id} has no stored evaluations yet; run `tunelab eval {run_id}`")
    return EXIT_OK
