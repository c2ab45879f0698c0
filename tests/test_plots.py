"""The loss plot: real PNGs in both themes, eval points and moving average drawn in
their colours, an empty history, and titles that say the state without leaking secrets."""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib import colors
from matplotlib.image import imread

from tunelab.orchestrator.plots import THEMES, loss_plot_png, moving_average, plot_title, redact

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STEPS = list(range(1, 41))
LOSSES = [3.0 / s + 0.1 * (s % 3) for s in STEPS]


def decode(png: bytes) -> np.ndarray:
    assert png.startswith(PNG_MAGIC)
    return imread(io.BytesIO(png), format="png")[..., :3]


def pixels_near(image: np.ndarray, colour: str, tolerance: float = 0.04) -> int:
    target = np.array(colors.to_rgb(colour))
    return int((np.abs(image - target).max(axis=-1) < tolerance).sum())


@pytest.mark.parametrize("theme", sorted(THEMES))
def test_png_in_each_theme(theme: str) -> None:
    image = decode(loss_plot_png(STEPS, LOSSES, title="Step 40/40", theme=theme))
    assert image.shape == (450, 800, 3)
    corner = image[2, 2]
    assert np.allclose(corner, colors.to_rgb(THEMES[theme]["background"]), atol=0.02)
    assert pixels_near(image, THEMES[theme]["average"]) > 50  # the moving average is drawn
    assert pixels_near(image, THEMES[theme]["eval"]) == 0


def test_themes_differ() -> None:
    light = decode(loss_plot_png(STEPS, LOSSES, title="t", theme="light"))
    dark = decode(loss_plot_png(STEPS, LOSSES, title="t", theme="dark"))
    assert light.mean() > 0.8 > 0.3 > dark.mean()


def test_eval_points_are_drawn() -> None:
    image = decode(loss_plot_png(STEPS, LOSSES, title="t", eval_steps=[10, 20, 30], eval_losses=[1.2, 0.9, 0.8]))
    assert pixels_near(image, THEMES["light"]["eval"]) > 20


@pytest.mark.parametrize("theme", sorted(THEMES))
def test_empty_history_draws_a_placeholder(theme: str) -> None:
    empty = decode(loss_plot_png([], [], title="Waiting for the first step", theme=theme))
    assert empty.shape == (450, 800, 3)
    only_bad = decode(loss_plot_png([1, 2], [float("nan"), None], title="Waiting for the first step", theme=theme))
    assert np.array_equal(empty, only_bad)
    assert pixels_near(empty, THEMES[theme]["average"]) == 0


def test_non_finite_points_are_skipped() -> None:
    png = loss_plot_png([1, 2, 3, 4, 5], [2.0, float("inf"), None, 1.5, float("nan")], title="t")
    assert decode(png).shape == (450, 800, 3)


def test_unknown_theme() -> None:
    with pytest.raises(ValueError, match="theme"):
        loss_plot_png(STEPS, LOSSES, title="t", theme="solarized")


def test_moving_average() -> None:
    assert moving_average([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert moving_average([4.0, 2.0, 6.0], 5) == [4.0, 3.0, 4.0]


@pytest.mark.parametrize(
    "state, title",
    [
        ({"phase": "idle"}, "No run yet"),
        ({"phase": "loading_model", "message": "Loading model tiny-llama"}, "Loading model tiny-llama"),
        ({"phase": "training", "step": None, "message": "Training"}, "Training"),
        ({"phase": "training", "step": 3, "total_steps": 10, "epoch": 0.5, "loss": 1.23456}, "Step 3/10 · epoch 0.50 · loss 1.2346"),
        ({"phase": "training", "step": 3, "loss": 2.0}, "Step 3 · loss 2.0000"),
        ({"phase": "completed", "loss": 0.12345}, "Completed - final loss 0.1235"),
        ({"status": "completed", "final_loss": 0.5, "loss": None}, "Completed - final loss 0.5000"),
        ({"phase": "completed", "loss": float("nan")}, "Completed"),
        ({"phase": "stopped", "step": 7}, "Stopped at step 7"),
        ({"phase": "stopped", "message": "Stopped and saved at step 7"}, "Stopped and saved at step 7"),
        ({"phase": "error", "error": "CUDA out of memory\nat step 3"}, "Error: CUDA out of memory at step 3"),
        ({"status": "error", "error_message": "server restarted during training"}, "Error: server restarted during training"),
    ],
)
def test_title_says_the_state(state: dict, title: str) -> None:
    assert plot_title(state) == title


def test_title_never_shows_secrets() -> None:
    secret = "s3cr3t-wandb-value"
    title = plot_title({"phase": "error", "error": f"login failed with {secret} for hf_AbCdEfGhIjKlMnOp"}, secrets=[secret])
    assert title == "Error: login failed with *** for ***"
    text = (f"{secret}; 401 via https://bob:pa55word@proxy.local (Authorization: Bearer eyJhbGciOi) key AKIAABCDEFGHIJKLMNOP")
    cleaned = redact(text, [secret])
    for leaked in (secret, "pa55word", "eyJhbGciOi", "AKIAABCDEFGHIJKLMNOP"):
        assert leaked not in cleaned
    assert "proxy.local" in cleaned
    long_title = plot_title({"phase": "error", "error": "x" * 500})
    assert len(long_title) <= 120 and long_title.endswith("…")
