"""What a benchmark reports: one `Result` per target, printed, saved as JSON and written
into docs/PERFORMANCE.md by run_all.py."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import bytecode
from sidebyside import Spread


@dataclass
class Result:
    key: str  # short name, e.g. "overhead"
    title: str  # "Trainer overhead"
    measures: str  # what the ratio is: "tunelab tokens/s ÷ plain TRL tokens/s"
    ratio: Spread
    target: float
    higher_is_better: bool
    command: str  # the command that reproduces it
    details: list[str] = field(default_factory=list)  # measured facts behind the ratio
    checks: dict[str, bool] = field(default_factory=dict)  # conditions that must hold too
    obstacle: str = ""  # for an unmet target: what stands in the way, and what was tried
    # Why the benchmark could not measure at all (e.g. a package it reads is not installed, and
    # the command that installs it): reported as not measured rather than as a failure.
    not_measured: str = ""
    # Each arm's options in force (tool, device, precision, layout, workers, ...), as the arm
    # itself reported them: written into the results and the report, so a reader sees what
    # every peer was given.
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ratio_met(self) -> bool:
        return self.ratio.median >= self.target if self.higher_is_better else self.ratio.median <= self.target

    @property
    def met(self) -> bool:
        return not self.not_measured and self.ratio_met and all(self.checks.values())

    @property
    def target_text(self) -> str:
        return f"{'≥' if self.higher_is_better else '≤'} {self.target:g}"

    def line(self) -> str:
        if self.not_measured:
            return f"{self.title:<34} NOT MEASURED: {self.not_measured}"
        verdict = "MET" if self.met else "NOT MET"
        failed = [name for name, ok in self.checks.items() if not ok]
        extra = f"  (failed: {', '.join(failed)})" if failed else ""
        return f"{self.title:<34} {self.ratio.text():<34} target {self.target_text:<8} {verdict}{extra}"

    def as_json(self) -> dict[str, Any]:
        return {"name": self.key, "title": self.title, "ratio": self.ratio.median, "target": self.target,
                "direction": ">=" if self.higher_is_better else "<=", "met": self.met,
                "spread": [self.ratio.low, self.ratio.high], "values": list(self.ratio.values),
                "measures": self.measures, "checks": self.checks, "details": self.details,
                "command": self.command, "obstacle": self.obstacle, "not_measured": self.not_measured,
                "arms": self.arms}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Result":
        ratio = Spread(data["ratio"], data["spread"][0], data["spread"][1], tuple(data["values"]))
        return cls(key=data["name"], title=data["title"], measures=data["measures"], ratio=ratio,
                   target=data["target"], higher_is_better=data["direction"] == ">=", command=data["command"],
                   details=data["details"], checks=data["checks"], obstacle=data.get("obstacle", ""),
                   not_measured=data.get("not_measured", ""), arms=data.get("arms", {}))


def standalone(name: str, measure: Callable[[bool], list[Result]], unmet_notes: dict[str, str] | None = None) -> None:
    """`python bench/<name>.py [--quick]`: run one benchmark and print its results."""
    parser = argparse.ArgumentParser(description=f"tunelab benchmark: {name}")
    parser.add_argument("--quick", action="store_true", help="fewer steps and repetitions")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    bytecode.like_an_install()
    started = time.monotonic()
    results = measure(args.quick)
    for result in results:
        if not result.met and not result.not_measured:
            result.obstacle = (unmet_notes or {}).get(result.key, "")
    for result in results:
        print(result.line())
        for detail in result.details:
            print(f"    {detail}")
    print(f"({time.monotonic() - started:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.as_json() for r in results], f, indent=1)
