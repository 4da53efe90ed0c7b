"""Sampler/schedule/guidance options of the official generate(), recorded (the official code
computes, this script only records). Latents only (return_latents=True), every random draw stored.

Writes <out>/sampler_options.safetensors with, per case C:
  C.draw_NN  every random draw in call order;  C.latents  generate(..., return_latents=True)
and metadata `cases` = JSON {case: kwargs beyond the common call}.
Common call: prompt 'warm ambient pad', negative 'harsh noise', duration 0.1,
duration_padding_sec 0.1, steps 6, cfg_scale 3 (APG default), seed 321; f32 text encoder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.environ.get("ARIA_REF_HARNESS", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "ref-harness")))
import sa3ref  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from make_fixtures import capture_randn  # noqa: E402
from stable_audio_3.inference.distribution_shift import (  # noqa: E402
    IdentityDistributionShift, FluxDistributionShift, DistributionShift, LogSNRShift)

KW = dict(prompt="warm ambient pad", negative_prompt="harsh noise", duration=0.1, duration_padding_sec=0.1,
          steps=6, cfg_scale=3.0, seed=321)

# name -> (extra kwargs for generate, JSON description of them)
CASES = {
    "rk4_identity": (dict(sampler_type="rk4", dist_shift=IdentityDistributionShift()),
                     {"sampler_type": "rk4", "dist_shift": {"type": "none"}}),
    "dpmpp_identity": (dict(sampler_type="dpmpp", dist_shift=IdentityDistributionShift()),
                       {"sampler_type": "dpmpp", "dist_shift": {"type": "none"}}),
    "euler_flux": (dict(sampler_type="euler", dist_shift=FluxDistributionShift(min_length=16, max_length=64, alpha_min=1.5, alpha_max=4.0)),
                   {"sampler_type": "euler", "dist_shift": {"type": "flux", "min_length": 16, "max_length": 64, "alpha_min": 1.5, "alpha_max": 4.0}}),
    "euler_full": (dict(sampler_type="euler", dist_shift=DistributionShift(base_shift=0.5, max_shift=1.15, max_length=64, min_length=16)),
                   {"sampler_type": "euler", "dist_shift": {"type": "full", "base_shift": 0.5, "max_shift": 1.15, "max_length": 64, "min_length": 16, "use_sine": False}}),
    "euler_logsnr": (dict(sampler_type="euler", dist_shift=LogSNRShift(anchor_length=20, anchor_logsnr=-5.0, rate=1.0, logsnr_end=3.0)),
                     {"sampler_type": "euler", "dist_shift": {"type": "logsnr", "anchor_length": 20, "anchor_logsnr": -5.0, "rate": 1.0, "logsnr_end": 3.0}}),
    "euler_cfg_interval": (dict(sampler_type="euler", cfg_interval=(0.3, 0.9)),
                           {"sampler_type": "euler", "cfg_interval": [0.3, 0.9]}),
    "euler_cfg_rescale": (dict(sampler_type="euler", scale_phi=0.7),
                          {"sampler_type": "euler", "scale_phi": 0.7}),
    "euler_cfg_norm": (dict(sampler_type="euler", cfg_norm_threshold=0.5),
                       {"sampler_type": "euler", "cfg_norm_threshold": 0.5}),
    "pingpong_cfg_all": (dict(cfg_interval=(0.2, 0.95), scale_phi=0.5, cfg_norm_threshold=1.0),
                         {"cfg_interval": [0.2, 0.95], "scale_phi": 0.5, "cfg_norm_threshold": 1.0}),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    cwd = os.getcwd()
    os.chdir(a.model_dir)
    sam = sa3ref.load(".", t5_dtype="float32")
    os.chdir(cwd)
    out, meta = {}, {}
    for name, (kw, desc) in CASES.items():
        draws = []
        with torch.inference_mode(), capture_randn(draws):
            lat = sam.generate(**KW, **kw, return_latents=True)
        out[f"{name}.latents"] = lat.float().contiguous()
        for i, (_, t) in enumerate(draws):
            out[f"{name}.draw_{i:02d}"] = t.float().contiguous()
        meta[name] = desc
        print(name, "draws", len(draws), "latents", list(lat.shape), float(lat.abs().max()))
    os.makedirs(a.out, exist_ok=True)
    save_file(out, os.path.join(a.out, "sampler_options.safetensors"),
              metadata={"generator": "make_sampler_options_fixture.py (official SA3 code)",
                        "call": json.dumps(KW), "cases": json.dumps(meta)})


if __name__ == "__main__":
    main()
