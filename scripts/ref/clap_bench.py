"""Times the reference CLAP (transformers' ClapModel and ClapFeatureExtractor, CPU) on the
measures `cargo xtask bench clap` compares: embedding one 10 s clip (feature extraction, then the
audio tower and projection) and embedding 1 000 captions (tokenization, then the text tower and
projection, in batches). The model folder is a released checkpoint or a random-weight one from
make_clap_fixtures.py; the tokenizer files are read from --tokenizer-dir when the folder has none.

Prints one JSON object: {"threads", "reps", "audio_10s": {"features_s": [...], "forward_s": [...],
"total_s": [...]}, "captions_1000": {"tokenize_s": [...], "forward_s": [...], "total_s": [...]},
"peak_rss_mb"}. The caller takes medians.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import time

import numpy as np
import torch
from transformers import ClapFeatureExtractor, ClapModel, RobertaTokenizer


def wave(seconds: float, rate: int = 48000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(7)
    return (0.3 * np.sin(2 * math.pi * 440 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer-dir")
    ap.add_argument("--captions", required=True, help="a text file, one caption a line")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=100)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = ClapModel.from_pretrained(a.model).eval()
    fe = ClapFeatureExtractor.from_pretrained(a.model)
    tok_dir = a.model if os.path.exists(os.path.join(a.model, "vocab.json")) or os.path.exists(
        os.path.join(a.model, "tokenizer.json")) else a.tokenizer_dir
    tok = RobertaTokenizer.from_pretrained(tok_dir)  # the fast (tokenizers) class in transformers 5
    captions = [c for c in open(a.captions, encoding="utf-8").read().split("\n") if c][:1000]
    x = wave(10.0)
    out = {"threads": a.threads, "reps": a.reps, "audio_10s": {}, "captions_1000": {}}
    au = {"features_s": [], "forward_s": [], "total_s": []}
    tx = {"tokenize_s": [], "forward_s": [], "total_s": []}
    with torch.inference_mode():
        for rep in range(a.reps + 1):  # the first is a warm-up
            t0 = time.perf_counter()
            f = fe(x, sampling_rate=48000, return_tensors="pt")
            t1 = time.perf_counter()
            model.get_audio_features(input_features=f["input_features"], is_longer=f["is_longer"])
            t2 = time.perf_counter()
            if rep:
                au["features_s"].append(t1 - t0)
                au["forward_s"].append(t2 - t1)
                au["total_s"].append(t2 - t0)
        for rep in range(a.reps + 1):
            tt = ft = 0.0
            for i in range(0, len(captions), a.batch):
                t0 = time.perf_counter()
                enc = tok(captions[i:i + a.batch], padding=True, truncation=True, max_length=77, return_tensors="pt")
                t1 = time.perf_counter()
                model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
                t2 = time.perf_counter()
                tt += t1 - t0
                ft += t2 - t1
            if rep:
                tx["tokenize_s"].append(tt)
                tx["forward_s"].append(ft)
                tx["total_s"].append(tt + ft)
    out["audio_10s"] = au
    out["captions_1000"] = tx
    out["captions"] = len(captions)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main()
