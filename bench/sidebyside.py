"""Side-by-side measurement on a noisy machine: alternate the arms, repeat, report the
median and the spread.

Other work on the machine comes and goes, so two arms measured one after the other can
differ by more than the effect being measured. Running them in alternating order (A B,
B A, A B, ...) spreads any drift over both arms; a ratio is taken per repetition (the
arms of one repetition ran next to each other) and the median of those ratios is the
figure reported, with the lowest and highest as its spread.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Spread:
    median: float
    low: float
    high: float
    values: tuple[float, ...]

    def text(self, digits: int = 3) -> str:
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}–{self.high:.{digits}f}, n={len(self.values)})"


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("no measurements")
    return Spread(statistics.median(values), min(values), max(values), tuple(values))


def alternate(arms: Sequence[tuple[str, Callable[[], T]]], repetitions: int,
              say: Callable[[str], None] = print) -> dict[str, list[T]]:
    """Run each arm `repetitions` times, reversing the arm order every other time."""
    results: dict[str, list[T]] = {name: [] for name, _ in arms}
    for rep in range(repetitions):
        order = arms if rep % 2 == 0 else list(reversed(arms))
        for name, measure in order:
            started = time.monotonic()
            results[name].append(measure())
            say(f"    {name} #{rep + 1}: {time.monotonic() - started:.1f} s")
    return results


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> Spread:
    """Per-repetition ratios (the i-th numerator over the i-th denominator)."""
    return spread([a / b for a, b in zip(numerators, denominators, strict=True)])
