#!/usr/bin/env python3
"""Golden outputs of librosa.effects.time_stretch for the phase-vocoder parity test.

Writes crates/aria-cache/tests/data/vocoder_goldens.json (the cases) and one little-endian f32
file per signal and per output. Inputs are generated here, stored as f32, and stretched in
float64 (librosa's stft n_fft=2048, hop 512, hann, center, constant padding; phase_vocoder;
istft with length=round(n / rate)).

Usage (any Python 3 with numpy and librosa 0.10):
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install librosa==0.10.2.post1
    /tmp/venv/bin/python scripts/cache/vocoder_goldens.py
"""

import json
import pathlib

import librosa
import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[2] / "crates/aria-cache/tests/data"
SR = 44100
RATES = [0.5, 0.8, 1.25, 1.5]


def tones(n, rng):
    t = np.arange(n) / SR
    left = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * (200 + 3000 * t) * t)
    right = 0.3 * np.sin(2 * np.pi * 660 * t + 0.3) + 0.05 * rng.standard_normal(n)
    return np.stack([left, right])


def clicks(n, rng):
    y = 0.02 * rng.standard_normal((2, n))
    for start in range(300, n, 1500):
        burst = np.exp(-np.arange(200) / 40.0)
        y[:, start : start + 200] += 0.8 * burst[: min(200, n - start)] * rng.choice([-1, 1], 2)[:, None]
    return y


def main():
    rng = np.random.default_rng(15)
    signals = {"tones": tones(6000, rng), "clicks": clicks(6000, rng), "short": tones(1000, rng)}
    cases = []
    for name, y in signals.items():
        y32 = y.astype(np.float32)
        fin = f"vocoder_{name}_in.f32"
        y32.tofile(OUT / fin)
        for rate in RATES:
            out = librosa.effects.time_stretch(y32.astype(np.float64), rate=rate)
            assert out.dtype == np.float64 and out.shape[-1] == int(round(y.shape[-1] / rate))
            fout = f"vocoder_{name}_r{rate:g}.f32"
            out.astype(np.float32).tofile(OUT / fout)
            cases.append({
                "signal": name, "channels": 2, "frames": y.shape[-1], "input": fin,
                "rate": rate, "output": fout, "output_frames": out.shape[-1],
            })
    (OUT / "vocoder_goldens.json").write_text(json.dumps({
        "librosa": librosa.__version__, "sample_rate": SR, "layout": "channel-major f32le",
        "cases": cases}, indent=1) + "\n")
    print(f"{len(cases)} cases written to {OUT}")


if __name__ == "__main__":
    main()
