"""Reference values for `aria_clap::measure`: BS.1770-4 integrated loudness (pyloudnorm, with its
"DeMan" analog-prototype filters and with its default RBJ-cookbook "K-weighting") of a few
deterministic signals and the Frechet distance of small embedding sets (numpy/scipy).

No audio or embeddings are stored: every input is defined by a few numbers in the output JSON and
regenerated bit-for-bit by the Rust tests (see `gen_*` below; the same definitions are
implemented in `crates/aria-clap/tests/measure.rs`).

Random numbers: splitmix64. Draw i (i = 1, 2, ...) of a stream with seed s is
    z = s + i * 0x9E3779B97F4A7C15 (mod 2^64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB; z ^= z >> 31
and u = (z >> 11) * 2^-53 in [0, 1); a uniform sample in [-1, 1) is 2u - 1.

Signals (float64, then rounded to float32, which is what both sides measure):
    x[n, c] = sum over parts p with c in p.channels and p.start <= n < p.start + p.len of
      sine:  p.amp * sin(2 * pi * p.freq * (n - p.start) / rate + p.phase)
      noise: p.amp * (2u - 1), one draw per (n, c) in order n-major, c in p.channels order,
             from the part's own stream (p.seed)
    parts are added in list order, starting from 0.0.

Embedding sets (n rows, dim columns, rank k, seed, shift): per row, draw k latents g (2u - 1) then
dim noise values v (2u - 1), and
    e[i, j] = v[j] + g[0] * w[0, j] + ... + g[k-1] * w[k-1, j] + shift * sin(0.1 * j)
with w[q, j] = cos(0.37 * (q + 1) * (j + 1)), added left to right, then rounded to float32.

Usage: python make_measure_fixture.py [--out fixtures/measure]
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys

import numpy as np
import pyloudnorm
import scipy
import scipy.linalg

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def uniform(seed: int, count: int) -> np.ndarray:
    """`count` splitmix64 draws from stream `seed`, as float64 in [0, 1)."""
    i = np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + i * GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def gen_signal(spec: dict) -> np.ndarray:
    """(samples, channels) float32."""
    rate, ch, total = spec["rate"], spec["channels"], spec["samples"]
    x = np.zeros((total, ch), dtype=np.float64)
    for p in spec["parts"]:
        s, ln, chans = p["start"], p["len"], p["channels"]
        if p["kind"] == "sine":
            k = np.arange(ln, dtype=np.float64)
            v = p["amp"] * np.sin(2.0 * np.pi * p["freq"] * k / rate + p["phase"])
            for c in chans:
                x[s:s + ln, c] = x[s:s + ln, c] + v
        elif p["kind"] == "noise":
            u = uniform(p["seed"], ln * len(chans)).reshape(ln, len(chans))
            for ci, c in enumerate(chans):
                x[s:s + ln, c] = x[s:s + ln, c] + p["amp"] * (2.0 * u[:, ci] - 1.0)
        else:
            raise ValueError(p["kind"])
    return x.astype(np.float32)


def gen_embeddings(spec: dict) -> np.ndarray:
    """(n, dim) float32."""
    n, d, k = spec["n"], spec["dim"], spec["rank"]
    u = 2.0 * uniform(spec["seed"], n * (k + d)).reshape(n, k + d) - 1.0
    g, e = u[:, :k], u[:, k:].copy()
    j = np.arange(d, dtype=np.float64)
    for q in range(k):
        w = np.cos(0.37 * (q + 1) * (j + 1))
        e = e + g[:, q:q + 1] * w[None, :]
    e = e + spec["shift"] * np.sin(0.1 * j)[None, :]
    return e.astype(np.float32)


def fd_sqrtm(e1: np.ndarray, e2: np.ndarray) -> float:
    """The usual FAD code (scipy.linalg.sqrtm of sigma1 @ sigma2), in float64."""
    e1, e2 = e1.astype(np.float64), e2.astype(np.float64)
    mu1, s1 = e1.mean(axis=0), np.cov(e1, rowvar=False)
    mu2, s2 = e2.mean(axis=0), np.cov(e2, rowvar=False)
    diff = mu1 - mu2
    covmean = scipy.linalg.sqrtm(s1.dot(s2))
    if not np.isfinite(covmean).all():
        offset = np.eye(s1.shape[0]) * 1e-6
        covmean = scipy.linalg.sqrtm((s1 + offset).dot(s2 + offset))
    if np.iscomplexobj(covmean):
        covmean = covmean.real
    return float(diff.dot(diff) + np.trace(s1) + np.trace(s2) - 2.0 * np.trace(covmean))


def fd_eigh(e1: np.ndarray, e2: np.ndarray) -> float:
    """The same distance through symmetric eigendecompositions (tr sqrt(S1^1/2 S2 S1^1/2))."""
    e1, e2 = e1.astype(np.float64), e2.astype(np.float64)
    mu1, s1 = e1.mean(axis=0), np.cov(e1, rowvar=False)
    mu2, s2 = e2.mean(axis=0), np.cov(e2, rowvar=False)
    lam, v = np.linalg.eigh(s1)
    r = (v * np.sqrt(np.clip(lam, 0.0, None))) @ v.T
    m = r @ s2 @ r
    mu = np.linalg.eigvalsh((m + m.T) / 2.0)
    tr = float(np.sqrt(np.clip(mu, 0.0, None)).sum())
    diff = mu1 - mu2
    return float(diff.dot(diff) + np.trace(s1) + np.trace(s2) - 2.0 * tr)


def fd_exact(e1: np.ndarray, e2: np.ndarray) -> float:
    """The same distance with tr (S1 S2)^1/2 as the nuclear norm of X1 X2^T / sqrt((n1-1)(n2-1))
    (X: centred data; the eigenvalues of S1 S2 are the squared singular values of that matrix):
    an SVD of the data, no squaring of condition numbers, accurate to ~1e-13 also when n < dim."""
    e1, e2 = e1.astype(np.float64), e2.astype(np.float64)
    x1, x2 = e1 - e1.mean(axis=0), e2 - e2.mean(axis=0)
    n1, n2 = len(e1), len(e2)
    tr = float(np.linalg.svd(x1 @ x2.T, compute_uv=False).sum()) / np.sqrt((n1 - 1) * (n2 - 1))
    diff = e1.mean(axis=0) - e2.mean(axis=0)
    tr1 = float((x1 * x1).sum()) / (n1 - 1)
    tr2 = float((x2 * x2).sum()) / (n2 - 1)
    return float(diff.dot(diff) + tr1 + tr2 - 2.0 * tr)


def sine(start, ln, chans, freq, amp, phase=0.0):
    return {"kind": "sine", "start": start, "len": ln, "channels": chans, "freq": freq, "amp": amp,
            "phase": phase}


def noise(start, ln, chans, amp, seed):
    return {"kind": "noise", "start": start, "len": ln, "channels": chans, "amp": amp, "seed": seed}


def db(x):
    return 10.0 ** (x / 20.0)


def signals() -> dict:
    s = {}
    s["sine997_m20dbfs_stereo_48k"] = {
        "rate": 48000, "channels": 2, "samples": 48000 * 3,
        "parts": [sine(0, 48000 * 3, [0, 1], 997.0, db(-20.0))]}
    s["sine997_0dbfs_mono_48k"] = {
        "rate": 48000, "channels": 1, "samples": 48000 * 2,
        "parts": [sine(0, 48000 * 2, [0], 997.0, 1.0)]}
    s["noise_mono_44k1"] = {
        "rate": 44100, "channels": 1, "samples": 44100 * 3,
        "parts": [noise(0, 44100 * 3, [0], 0.25, 7)]}
    # Absolute gate (silence), relative gate (a part 30 dB down), uneven stereo.
    r = 48000
    s["gated_stereo_48k"] = {
        "rate": r, "channels": 2, "samples": r * 6,
        "parts": [sine(0, r, [0, 1], 440.0, db(-12.0)),
                  sine(0, r, [1], 3000.0, db(-30.0), 0.5),
                  noise(2 * r, r // 2, [0, 1], db(-42.0), 11),
                  sine(3 * r, r + r // 4, [0], 1000.0, db(-18.0)),
                  noise(3 * r, r + r // 4, [1], db(-24.0), 12)]}
    s["mix_mono_8k"] = {
        "rate": 8000, "channels": 1, "samples": 8000 * 2,
        "parts": [sine(0, 16000, [0], 200.0, 0.3), sine(0, 16000, [0], 1500.0, 0.2, 1.0),
                  noise(4000, 8000, [0], 0.05, 5)]}
    s["noise_stereo_96k"] = {
        "rate": 96000, "channels": 2, "samples": 96000 * 5 // 2,
        "parts": [noise(0, 96000 * 5 // 2, [0, 1], 0.5, 21), sine(0, 96000 * 5 // 2, [1], 30000.0, 0.1)]}
    # Five channels L R C Ls Rs (weights 1, 1, 1, 1.41, 1.41), an uneven length.
    s["five_channel_48k"] = {
        "rate": 48000, "channels": 5, "samples": 48000 + 777,
        "parts": [sine(0, 48777, [0], 500.0, 0.2), sine(0, 48777, [1], 700.0, 0.1),
                  sine(0, 48777, [2], 2000.0, 0.15), noise(0, 48777, [3, 4], 0.1, 31)]}
    # Just over one block: the block count's rounding.
    s["short_mono_44k1"] = {
        "rate": 44100, "channels": 1, "samples": 17640 + 123,
        "parts": [sine(0, 17763, [0], 250.0, 0.5)]}
    return s


def embedding_cases() -> dict:
    return {
        # n < dim: rank-deficient covariances.
        "rank_deficient_512": {"a": {"n": 300, "dim": 512, "rank": 8, "seed": 101, "shift": 0.0},
                               "b": {"n": 250, "dim": 512, "rank": 8, "seed": 202, "shift": 0.05}},
        "full_rank_64": {"a": {"n": 200, "dim": 64, "rank": 4, "seed": 303, "shift": 0.0},
                         "b": {"n": 150, "dim": 64, "rank": 4, "seed": 404, "shift": 0.2}},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "measure"))
    a = ap.parse_args()
    out = {"generator": "scripts/ref/make_measure_fixture.py",
           "versions": {"numpy": np.__version__, "scipy": scipy.__version__,
                        "pyloudnorm": importlib.metadata.version("pyloudnorm"),
                        "python": sys.version.split()[0]},
           "loudness": {}, "frechet": {}}
    for name, spec in signals().items():
        x = gen_signal(spec).astype(np.float64)
        x = x[:, 0] if spec["channels"] == 1 else x
        # "DeMan": the analog-prototype design, which reproduces the standard's 48 kHz
        # coefficients; "K-weighting" (pyloudnorm's default): RBJ-cookbook biquads.
        lufs = float(pyloudnorm.Meter(spec["rate"], filter_class="DeMan").integrated_loudness(x))
        cook = float(pyloudnorm.Meter(spec["rate"], filter_class="K-weighting").integrated_loudness(x))
        out["loudness"][name] = {"signal": spec, "lufs": lufs, "lufs_cookbook": cook}
        print(f"{name}: {lufs:.6f} LUFS (cookbook filters {cook:.6f})")
    for name, case in embedding_cases().items():
        e1, e2 = gen_embeddings(case["a"]), gen_embeddings(case["b"])
        sq, eg, ex = fd_sqrtm(e1, e2), fd_eigh(e1, e2), fd_exact(e1, e2)
        out["frechet"][name] = {**case, "fd_exact": ex, "fd_sqrtm": sq, "fd_eigh": eg,
                                "checksum_a": float(e1.astype(np.float64).sum()),
                                "checksum_b": float(e2.astype(np.float64).sum())}
        print(f"{name}: exact {ex!r}  sqrtm {sq!r} (rel {abs(sq - ex) / abs(ex):.2e})  "
              f"eigh {eg!r} (rel {abs(eg - ex) / abs(ex):.2e})")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
