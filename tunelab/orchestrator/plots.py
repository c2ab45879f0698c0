"""The loss plot (SPEC §4): a PNG with raw losses, their moving average and eval loss,
in a light or dark theme, plus the title that says where the run stands.

matplotlib is imported inside the drawing function so the server starts fast. Figures
are drawn with matplotlib's object API on an Agg canvas, never through pyplot: pyplot
keeps global state that is not safe across the server's request threads.
"""

from __future__ import annotations

import io
import re
from typing import Any, Iterable, Mapping, Sequence

from tunelab.events import finite_or_none

THEMES: dict[str, dict[str, str]] = {
    "light": {"background": "#ffffff", "text": "#1f2937", "grid": "#e5e7eb", "raw": "#93c5fd", "average": "#1d4ed8", "eval": "#dc2626"},
    "dark": {"background": "#111827", "text": "#e5e7eb", "grid": "#374151", "raw": "#1e40af", "average": "#93c5fd", "eval": "#f87171"},
}
TITLE_MAX_CHARS = 120
MAX_AVERAGE_WINDOW = 50
# Token shapes worth hiding even when the caller did not name them as secrets.
_TOKEN_PATTERNS = (
    re.compile(r"\bhf_[A-Za-z0-9]{8,}"),
    re.compile(r"(?i)\bbearer\s+\S+"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),  # user:password@ in a URL
)


def loss_plot_png(
    steps: Sequence[Any],
    losses: Sequence[Any],
    *,
    title: str,
    theme: str = "light",
    eval_steps: Sequence[Any] | None = None,
    eval_losses: Sequence[Any] | None = None,
) -> bytes:
    """Draw the loss curve and return PNG bytes. Points whose loss is missing or not
    finite are left out; with nothing left the figure says "no data yet"."""
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {sorted(THEMES)}, got {theme!r}")
    colours = THEMES[theme]
    train = _finite_pairs(steps, losses)
    evals = _finite_pairs(eval_steps or [], eval_losses or [])

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 4.5), dpi=100, facecolor=colours["background"])
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_facecolor(colours["background"])
    axes.set_title(_one_line(title), color=colours["text"], fontsize=11)
    for spine in axes.spines.values():
        spine.set_color(colours["grid"])
    axes.tick_params(colors=colours["text"], labelsize=9)

    if not train and not evals:
        axes.text(0.5, 0.5, "no data yet", transform=axes.transAxes, ha="center", va="center", color=colours["text"], fontsize=14)
        axes.set_xticks([])
        axes.set_yticks([])
    else:
        axes.grid(True, color=colours["grid"], linewidth=0.6)
        axes.set_xlabel("step", color=colours["text"])
        axes.set_ylabel("loss", color=colours["text"])
        if train:
            xs, ys = zip(*train)
            axes.plot(xs, ys, color=colours["raw"], linewidth=1, marker="o", markersize=2, label="loss")
            if len(ys) >= 4:
                window = max(2, min(MAX_AVERAGE_WINDOW, len(ys) // 10))
                axes.plot(xs, moving_average(ys, window), color=colours["average"], linewidth=2, label=f"moving average ({window})")
        if evals:
            xs, ys = zip(*evals)
            axes.plot(xs, ys, color=colours["eval"], linestyle="none", marker="D", markersize=5, label="eval loss")
        legend = axes.legend(facecolor=colours["background"], edgecolor=colours["grid"], fontsize=9)
        for text in legend.get_texts():
            text.set_color(colours["text"])

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", facecolor=colours["background"])
    return buffer.getvalue()


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over `window` points; the first points average what exists so far,
    so the line starts at the first step instead of `window` steps in."""
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_title(state: Mapping[str, Any], secrets: Iterable[str] = ()) -> str:
    """One line saying where a run stands, from an orchestrator snapshot (`phase`) or a
    stored run (`status`): the error, completion with the final loss, the status
    message, or step/epoch/loss. `secrets` (and token-shaped text) never appear in it."""
    phase = state.get("phase") or state.get("status") or "idle"
    error = state.get("error") or state.get("error_message")
    message = state.get("message") or state.get("status_message")
    loss = finite_or_none(state.get("loss"))
    if phase == "error":
        title = f"Error: {error or 'the run failed'}"
    elif phase == "completed":
        final = finite_or_none(state.get("final_loss"))
        final = final if final is not None else loss
        title = f"Completed - final loss {final:.4f}" if final is not None else "Completed"
    elif phase == "stopped":
        title = message or f"Stopped at step {state.get('final_step') or state.get('step') or 0}"
    elif state.get("step") and loss is not None:
        title = _step_line(state, loss)
    elif message:
        title = message
    elif phase == "idle":
        title = "No run yet"
    else:
        title = "Waiting for the first step"
    return _one_line(redact(title, secrets))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every given secret and every token-shaped string replaced by ***."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    for pattern in _TOKEN_PATTERNS:
        text = pattern.sub("***", text)
    return text


def _step_line(state: Mapping[str, Any], loss: float) -> str:
    total = state.get("total_steps")
    parts = [f"Step {state['step']}/{total}" if total else f"Step {state['step']}"]
    epoch = finite_or_none(state.get("epoch"))
    if epoch is not None:
        parts.append(f"epoch {epoch:.2f}")
    parts.append(f"loss {loss:.4f}")
    return " · ".join(parts)


def _finite_pairs(steps: Sequence[Any], values: Sequence[Any]) -> list[tuple[float, float]]:
    pairs = []
    for step, value in zip(steps, values):
        x, y = finite_or_none(step), finite_or_none(value)
        if x is not None and y is not None:
            pairs.append((x, y))
    return pairs


def _one_line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= TITLE_MAX_CHARS else flat[: TITLE_MAX_CHARS - 1] + "…"
