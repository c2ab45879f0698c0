"""The speech demo's clips are real speech from espeak-ng: a spoken sentence decodes and
resamples from espeak-ng's 22.05 kHz and from 44.1 kHz to the same 16 kHz samples, the
demo data holds every rate it promises, and without espeak-ng the build stops saying how
to install it (no silent fallback)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile

from tunelab.demos.speech import SAMPLE_RATES, MissingSynthesiser, ensure_speech_demo_assets, speak, write_clip
from tunelab.worker.families.speech.collator import decode_clip


def test_spoken_clips_resample_from_22_05_and_44_1_khz_to_the_same_samples(speech_assets, tmp_path):
    samples, rate = speak("seven three one", voice="en-us", speed=170, pitch=50)
    assert rate == 22050 and len(samples) > rate // 2 and np.abs(samples).max() > 0.05  # half a second of sound at least
    write_clip(tmp_path / "native.wav", samples, rate, 22050)
    write_clip(tmp_path / "high.flac", samples, rate, 44100)
    native = decode_clip({"path": str(tmp_path / "native.wav"), "bytes": None}, 16000)
    high = decode_clip({"path": str(tmp_path / "high.flac"), "bytes": None}, 16000)
    assert abs(len(native) - len(samples) * 16000 / 22050) <= 2 and abs(len(high) - len(native)) <= 2
    n = min(len(native), len(high))
    # The same speech either way: the two decodes agree sample by sample (flac is lossless).
    assert np.corrcoef(native[:n], high[:n])[0, 1] > 0.99
    # The demo data itself holds all three rates, wav and flac.
    rows = [json.loads(line) for line in speech_assets.transcripts.read_text().splitlines()]
    infos = [soundfile.info(speech_assets.data_dir / row["audio"]) for row in rows[:8]]
    assert {info.samplerate for info in infos} == set(SAMPLE_RATES) and {info.format for info in infos} == {"WAV", "FLAC"}


def test_without_espeak_ng_the_demo_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no espeak-ng on it
    with pytest.raises(MissingSynthesiser) as caught:
        ensure_speech_demo_assets(tmp_path / "assets")
    assert "espeak-ng, which is not installed" in str(caught.value) and "apt-get install espeak-ng" in str(caught.value)
    assert not (tmp_path / "assets").exists()  # nothing half-built is left as if it were the demo
