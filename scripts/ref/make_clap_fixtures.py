"""CLAP parity fixtures recorded from the reference implementation (Hugging Face `transformers`
ClapModel / ClapFeatureExtractor) with random weights. transformers computes, this script only
records: every tensor below is an input we chose or a value returned by a transformers call or
captured with a forward hook on a transformers module.

    python scripts/ref/make_clap_fixtures.py --config tiny-unfused --out fixtures/clap-tiny-unfused
    python scripts/ref/make_clap_fixtures.py --config tiny-fused   --out fixtures/clap-tiny-fused
    python scripts/ref/make_clap_fixtures.py --config htsat-unfused --out <dir>   # real shapes, local only
    python scripts/ref/make_clap_fixtures.py --config larger-music  --out <dir>   # real shapes, local only

Writes into --out:
  config.json, model.safetensors      ClapModel.save_pretrained(out, safe_serialization=True)
  preprocessor_config.json            ClapFeatureExtractor(...).save_pretrained(out)
  features.safetensors                test waveforms, extractor outputs per clip, recorded numpy draws,
                                      the extractor's mel filter banks
  audio.safetensors                   audio tower boundaries (B=3), f32 and float64 twins
  text.safetensors                    text tower boundaries (B=3), f32 and float64 twins
  similarity.safetensors              ClapModel.forward logits, logit scales
  manifest.json                       every tensor: shape, dtype, producer, f32-vs-f64 / thread statistics

Conventions (see fixtures/CLAP.md): every stored tensor is F32, I64, BOOL or F16 (the waveforms, exact)
-- dtypes the project's safetensors loader accepts. `<name>.f64` = the same computation with the model and its
inputs in float64, rounded to f32 for storage; the manifest's statistics are measured against
the unrounded float64 values.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import time

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn
from transformers import ClapConfig, ClapFeatureExtractor, ClapModel
from transformers.models.clap import feature_extraction_clap as fe_mod
from transformers.models.clap import modeling_clap as mc

SR = 48_000
MAX_LEN = 480_000  # ClapFeatureExtractor default max_length_s=10 at 48 kHz

# ---------------------------------------------------------------------------------------------
# configurations

TINY_AUDIO = dict(
    spec_size=256, num_mel_bins=64, patch_size=4, patch_stride=[4, 4], window_size=8,
    patch_embeds_hidden_size=16, hidden_size=128, depths=[2, 2, 2, 2], num_attention_heads=[1, 2, 2, 4],
)
TINY_TEXT = dict(
    vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
    max_position_embeddings=514,
)

CONFIGS = {
    # committed fixtures
    "tiny-unfused": dict(audio=dict(TINY_AUDIO, enable_fusion=False), text=TINY_TEXT, projection_dim=24,
                         truncation="rand_trunc", twins="small"),
    "tiny-fused": dict(audio=dict(TINY_AUDIO, enable_fusion=True, fusion_type="aff_2d"), text=TINY_TEXT,
                       projection_dim=24, truncation="fusion", twins="small"),
    # real shapes (local parity runs, never committed)
    # laion/clap-htsat-unfused: the ClapConfig defaults (HTSAT-tiny 96 -> 768, depths 2,2,6,2; RoBERTa-base)
    "htsat-unfused": dict(audio=dict(enable_fusion=False), text=dict(), projection_dim=512,
                          truncation="rand_trunc", twins="all"),
    # laion/larger_clap_music
    "larger-music": dict(audio=dict(patch_embeds_hidden_size=128, hidden_size=1024, depths=[2, 2, 12, 2],
                                    num_attention_heads=[4, 8, 16, 32], enable_fusion=False),
                         text=dict(), projection_dim=512, truncation="rand_trunc", twins="all"),
}

# bn0 running_mean centre per truncation mode (the two modes use different mel filter banks)
BN0_MEAN = {"rand_trunc": -15.0, "fusion": 8.0}

# tensors with at most this many elements get a stored `.f64` twin under twins="small"
SMALL_TWIN_NUMEL = 32768

# ---------------------------------------------------------------------------------------------
# inputs

# (name, samples, numpy seed, sines [(freq Hz, amplitude)], amplitude-envelope rate Hz)
CLIPS = [
    ("short", 158_400, 11, [(220.0, 0.30), (1375.0, 0.15), (5210.0, 0.05)], 0.7),
    ("exact", 480_000, 12, [(330.0, 0.25), (2222.0, 0.12), (9100.0, 0.04)], 0.3),
    ("long", 657_600, 13, [(110.0, 0.30), (880.0, 0.10), (3300.0, 0.08), (12500.0, 0.03)], 0.11),
]
WAVE_QUANT = 2048.0  # samples are multiples of 1/2048: exact in f16, f32 and f64


def make_wave(n, seed, sines, env_rate):
    """Deterministic test clip: sines (one of them gliding) under a slow amplitude envelope plus
    seeded Gaussian noise, quantized to multiples of 2^-11, |x| < 1."""
    rs = np.random.RandomState(seed)
    t = np.arange(n, dtype=np.float64) / SR
    x = np.zeros(n)
    for k, (f, a) in enumerate(sines):
        phase = rs.uniform(0, 2 * np.pi)
        if k == 1:  # a glide: instantaneous frequency f * (1 + 0.5 t / duration)
            x += a * np.sin(2 * np.pi * f * (t + 0.25 * t * t / t[-1]) + phase)
        else:
            x += a * np.sin(2 * np.pi * f * t + phase)
    env = 0.55 + 0.45 * np.sin(2 * np.pi * env_rate * t + rs.uniform(0, 2 * np.pi))
    x = x * env + 0.04 * rs.randn(n)
    x = x * (0.8 / np.abs(x).max())
    q = np.round(x * WAVE_QUANT) / WAVE_QUANT
    assert np.abs(q).max() < 1.0
    return q.astype(np.float32)


def make_text_inputs(vocab_size, seed):
    """B=3 RoBERTa-style id rows <s>=0 ... </s>=2, right-padded with <pad>=1: content lengths 7, 1, 20."""
    g = torch.Generator().manual_seed(seed)
    lens = [7, 1, 20]
    width = max(lens) + 2
    ids = torch.full((3, width), 1, dtype=torch.long)
    mask = torch.zeros((3, width), dtype=torch.long)
    for b, n in enumerate(lens):
        content = torch.randint(3, vocab_size, (n,), generator=g)
        row = torch.cat([torch.tensor([0]), content, torch.tensor([2])])
        ids[b, : n + 2] = row
        mask[b, : n + 2] = 1
    return ids, mask


# ---------------------------------------------------------------------------------------------
# random weights


def randomize(model: ClapModel, seed: int, bn0_mean: float):
    """Every floating-point parameter and buffer gets a seeded random value (O(1) activations).
    Integer buffers (relative_position_index, position_ids, token_type_ids, num_batches_tracked)
    are index tables / counters and keep their constructed values."""
    g = torch.Generator().manual_seed(seed)

    def n(shape):
        return torch.randn(shape, generator=g, dtype=torch.float64)

    def u(shape):
        return torch.rand(shape, generator=g, dtype=torch.float64)

    done = set()
    bn0 = model.audio_model.audio_encoder.batch_norm
    with torch.no_grad():
        for mname, mod in model.named_modules():
            pre = f"{mname}." if mname else ""
            if isinstance(mod, (nn.LayerNorm, nn.BatchNorm2d)):
                mod.weight.copy_(1 + 0.1 * n(mod.weight.shape))
                mod.bias.copy_(0.02 * n(mod.bias.shape))
                done |= {pre + "weight", pre + "bias"}
                if isinstance(mod, nn.BatchNorm2d):
                    if mod is bn0:
                        # input is a log-mel spectrogram in dB, std about 10 on the test clips, mean about
                        # -15 with the slaney filters (rand_trunc) and +8 with the htk filters (fusion)
                        mod.running_mean.copy_(bn0_mean + 3 * n(mod.running_mean.shape))
                        mod.running_var.copy_(100 * (0.5 + u(mod.running_var.shape)))
                    else:
                        mod.running_mean.copy_(0.1 * n(mod.running_mean.shape))
                        mod.running_var.copy_(0.5 + u(mod.running_var.shape))
                    done |= {pre + "running_mean", pre + "running_var"}
            elif isinstance(mod, (nn.Linear, nn.Conv2d)):
                fan_in = mod.weight[0].numel()
                mod.weight.copy_(n(mod.weight.shape) / math.sqrt(fan_in))
                done.add(pre + "weight")
                if mod.bias is not None:
                    mod.bias.copy_(0.02 * n(mod.bias.shape))
                    done.add(pre + "bias")
            elif isinstance(mod, nn.Embedding):
                mod.weight.copy_(0.5 * n(mod.weight.shape))
                done.add(pre + "weight")
            elif isinstance(mod, mc.ClapAudioSelfAttention):
                mod.relative_position_bias_table.copy_(0.5 * n(mod.relative_position_bias_table.shape))
                done.add(pre + "relative_position_bias_table")
        for p in (model.logit_scale_a, model.logit_scale_t):
            p.copy_(math.log(1 / 0.07) + 0.2 * n(()))
        done |= {"logit_scale_a", "logit_scale_t"}
    floating = {k for k, v in model.state_dict().items() if v.is_floating_point()}
    missing = sorted(floating - done)
    assert not missing, f"not randomized: {missing}"
    return sorted(k for k, v in model.state_dict().items() if not v.is_floating_point())


# ---------------------------------------------------------------------------------------------
# recording helpers


class Recorder:
    """Forward hooks that copy module inputs/outputs into a dict."""

    def __init__(self):
        self.t = {}
        self.handles = []

    def out(self, module, name, pick=None):
        def hook(_m, _args, output):
            v = output if pick is None else pick(output)
            self.t[name] = v.detach().clone()

        self.handles.append(module.register_forward_hook(hook))

    def inp(self, module, name, idx=0):
        def hook(_m, args):
            self.t[name] = args[idx].detach().clone()

        self.handles.append(module.register_forward_pre_hook(hook))

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


@contextlib.contextmanager
def record_draws(log):
    """Wrap numpy's global np.random.randint / np.random.choice (the only random calls of
    ClapFeatureExtractor) and log each call as [kind, low, high, value]:
    kind 0 = randint(low, high) -> value in [low, high); kind 1 = choice(a) where a is the
    contiguous integer range [low, high) (asserted)."""
    rr, rc = np.random.randint, np.random.choice

    def randint(low, high=None, size=None, dtype=int):
        assert high is not None and size is None
        v = rr(low, high, size=size, dtype=dtype)
        log.append([0, int(low), int(high), int(v)])
        return v

    def choice(a, size=None, replace=True, p=None):
        assert size is None and p is None
        arr = np.asarray(a)
        assert arr.ndim == 1 and arr.size > 0 and np.array_equal(arr, np.arange(arr[0], arr[0] + arr.size)), arr
        v = rc(a, size=size, replace=replace, p=p)
        log.append([1, int(arr[0]), int(arr[0] + arr.size), int(v)])
        return v

    np.random.randint, np.random.choice = randint, choice
    try:
        yield
    finally:
        np.random.randint, np.random.choice = rr, rc


def extract(fx, wave, mode, seed):
    """One reference extractor call on one clip (batch of one), numpy draws recorded."""
    draws = []
    np.random.seed(seed)
    with record_draws(draws):
        out = fx(wave, sampling_rate=SR, truncation=mode, return_tensors="pt")
    return out["input_features"], out["is_longer"], torch.tensor(draws, dtype=torch.long).reshape(-1, 4)


@contextlib.contextmanager
def extractor_in_float64():
    """Run the same extractor code with `spectrogram(..., dtype=np.float64)` (its default is float32):
    used only to measure how far the stored f32 features are from the float64 pipeline."""
    orig = fe_mod.spectrogram

    def spec64(*a, **k):
        k["dtype"] = np.float64
        return orig(*a, **k)

    fe_mod.spectrogram = spec64
    try:
        yield
    finally:
        fe_mod.spectrogram = orig


def stats(x32, ref):
    a = x32.double()
    r = ref.double()
    d = (a - r).abs()
    den = r.abs().max().item()
    rms = (r.pow(2).mean().sqrt()).item()
    return {
        "max_abs": d.max().item() if d.numel() else 0.0,
        "max_abs_over_max_ref": (d.max().item() / den) if d.numel() and den > 0 else 0.0,
        "rms_rel": ((d.pow(2).mean().sqrt()).item() / rms) if d.numel() and rms > 0 else 0.0,
    }


def check_finite(tensors, what):
    for k, v in tensors.items():
        if v.is_floating_point():
            assert torch.isfinite(v).all(), f"{what}: {k} has NaN/inf"


# ---------------------------------------------------------------------------------------------
# model runs


def audio_run(model, feats, is_longer, fused):
    """get_audio_features on a batch, with hooks on every boundary. Returns {name: tensor}."""
    enc = model.audio_model.audio_encoder
    rec = Recorder()
    rec.inp(enc.patch_embed, "audio.mel2img")
    if fused:
        rec.out(enc.patch_embed.mel_conv2d, "audio.patch_embed.mel_conv2d")
        rec.out(enc.patch_embed.fusion_model, "audio.patch_embed.fusion")
    rec.out(enc.patch_embed, "audio.patch_embed")
    for i, layer in enumerate(enc.layers):
        rec.out(layer, f"audio.layer{i}.pre_down", lambda o: o[1])
        rec.out(layer, f"audio.layer{i}", lambda o: o[0])
    rec.out(enc.norm, "audio.norm")
    rec.inp(model.audio_projection, "audio.pooler")
    rec.out(model.audio_projection, "audio.proj")
    try:
        with torch.no_grad():
            res = model.get_audio_features(input_features=feats, is_longer=is_longer)
    finally:
        rec.remove()
    t = rec.t
    t["audio.last_hidden_state"] = res.last_hidden_state.detach().clone()
    t["audio.embeds"] = res.pooler_output.detach().clone()
    return t


def text_run(model, ids, mask):
    tm = model.text_model
    rec = Recorder()
    rec.out(tm.embeddings, "text.embeddings")
    for i, layer in enumerate(tm.encoder.layer):
        rec.out(layer, f"text.layer{i}", lambda o: o[0] if isinstance(o, tuple) else o)
    rec.inp(model.text_projection, "text.pooler")
    rec.out(model.text_projection, "text.proj")
    try:
        with torch.no_grad():
            res = model.get_text_features(input_ids=ids, attention_mask=mask)
    finally:
        rec.remove()
    t = rec.t
    t["text.last_hidden_state"] = res.last_hidden_state.detach().clone()
    t["text.embeds"] = res.pooler_output.detach().clone()
    return t


def sim_run(model, ids, mask, feats, is_longer):
    with torch.no_grad():
        o = model(input_ids=ids, attention_mask=mask, input_features=feats, is_longer=is_longer)
    return {
        "logits_per_text": o.logits_per_text.detach().clone(),
        "logits_per_audio": o.logits_per_audio.detach().clone(),
    }, o


def all_runs(model, feats, is_longer, ids, mask, fused, mixed_is_longer):
    a = audio_run(model, feats, is_longer, fused)
    if fused:
        m = audio_run(model, feats, mixed_is_longer, fused)
        for k in ("audio.pooler", "audio.proj", "audio.embeds"):
            a[k.replace("audio.", "audio.mixed.")] = m[k]
    t = text_run(model, ids, mask)
    s, _ = sim_run(model, ids, mask, feats, is_longer)
    return a, t, s


# ---------------------------------------------------------------------------------------------

PRODUCERS = {
    "audio.mel2img": "forward pre-hook on audio_model.audio_encoder.patch_embed, args[0]: the input image after "
                     "batch_norm (bn0, per mel bin) + reshape_mel2img (bicubic resize of time 1001 -> 1024, "
                     "align_corners=True; fold to spec_size x spec_size)",
    "audio.patch_embed.mel_conv2d": "forward hook on audio_model.audio_encoder.patch_embed.mel_conv2d (fused only; "
                                    "runs on channels 1..3 of the is_longer rows, batch = 3 x n_longer)",
    "audio.patch_embed.fusion": "forward hook on audio_model.audio_encoder.patch_embed.fusion_model (AFF block; "
                                "rows = the is_longer clips, in batch order)",
    "audio.patch_embed": "forward hook on audio_model.audio_encoder.patch_embed (after flatten + LayerNorm)",
    "audio.layer{i}.pre_down": "forward hook on audio_model.audio_encoder.layers[i], output[1] "
                               "(hidden_states_before_downsampling)",
    "audio.layer{i}": "forward hook on audio_model.audio_encoder.layers[i], output[0] (after patch merging; "
                      "= pre_down for the last stage)",
    "audio.norm": "forward hook on audio_model.audio_encoder.norm (final LayerNorm, token layout [B, tokens, C])",
    "audio.last_hidden_state": "ClapModel.get_audio_features(...).last_hidden_state (the norm output regrouped to "
                               "[B, C, freq_ratio-grouped freq, time]; see CLAP.md)",
    "audio.pooler": "forward pre-hook on audio_projection, args[0] (= audio_model pooler_output, AdaptiveAvgPool1d)",
    "audio.proj": "forward hook on audio_projection (linear1 -> relu -> linear2), not normalized",
    "audio.embeds": "ClapModel.get_audio_features(...).pooler_output (= F.normalize(audio.proj, dim=-1))",
    "audio.mixed.*": "same hooks/call as audio.* with the same input_features but is_longer = [F, F, T] (the flags a "
                     "batch extraction of short+exact+long returns)",
    "text.embeddings": "forward hook on text_model.embeddings",
    "text.layer{i}": "forward hook on text_model.encoder.layer[i]",
    "text.last_hidden_state": "ClapModel.get_text_features(...).last_hidden_state",
    "text.pooler": "forward pre-hook on text_projection, args[0] (= text_model pooler_output: tanh(dense(h[:, 0])))",
    "text.proj": "forward hook on text_projection, not normalized",
    "text.embeds": "ClapModel.get_text_features(...).pooler_output (= F.normalize(text.proj, dim=-1))",
    "logits_per_text": "ClapModel.forward(input_ids, attention_mask, input_features, is_longer).logits_per_text "
                       "[texts, clips] (scaled by exp(logit_scale_t))",
    "logits_per_audio": "ClapModel.forward(...).logits_per_audio [clips, texts] (scaled by exp(logit_scale_a))",
}


def producer(name):
    base = name[:-4] if name.endswith(".f64") else name
    if base in PRODUCERS:
        return PRODUCERS[base]
    for k, v in PRODUCERS.items():
        if "{i}" in k:
            pre, post = k.split("{i}")
            if base.startswith(pre) and base.endswith(post) and base[len(pre):len(base) - len(post)].isdigit():
                return v
        if k.endswith("*") and base.startswith(k[:-1]):
            return v
    return None


def describe_draws(mode, rows):
    """What each recorded numpy draw of one extractor call selects (ClapFeatureExtractor source order)."""
    out = []
    chunk = 0
    for kind, low, high, v in rows:
        if kind == 0 and mode == "rand_trunc":
            what = f"crop offset in samples (_get_input_mel, clip longer than {MAX_LEN}): waveform[{v}:{v} + {MAX_LEN}]"
        elif kind == 0:
            what = ("__call__: no clip of the batch is longer than max_length, so is_longer[v] is set to True "
                    "(batch of one: always 0)")
        else:
            part = ["idx_front", "idx_middle", "idx_back"][chunk]
            what = (f"_random_mel_fusion {part}: mel frames [{v}, {v} + chunk_frames) of the full-clip mel "
                    f"become channel {chunk + 1}")
            chunk += 1
        call = f"np.random.randint({low}, {high})" if kind == 0 else f"np.random.choice(np.arange({low}, {high}))"
        out.append({"row": [kind, low, high, v], "call": call, "value": v, "meaning": what})
    return out


def st_dtype(t):
    return {torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL", torch.float16: "F16"}[t.dtype]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed of the random weights")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    ap.add_argument("--twins", choices=["all", "small"], default=None,
                    help=f"which .f64 twins to store (small: <= {SMALL_TWIN_NUMEL} elements); default per config")
    ap.add_argument("--timing", action="store_true", help="also time one 10 s clip and the text forward (f32)")
    a = ap.parse_args()

    t_start = time.time()
    torch.set_num_threads(a.threads)
    cfgd = CONFIGS[a.config]
    twins = a.twins or cfgd["twins"]
    fused = bool(cfgd["audio"].get("enable_fusion", False))
    mode = cfgd["truncation"]
    os.makedirs(a.out, exist_ok=True)

    # ---- model: random weights, saved with the reference writer
    config = ClapConfig(text_config=dict(cfgd["text"]), audio_config=dict(cfgd["audio"]),
                        projection_dim=cfgd["projection_dim"])
    torch.manual_seed(a.seed)
    model = ClapModel(config).eval()
    int_buffers = randomize(model, a.seed, BN0_MEAN[mode])
    model.save_pretrained(a.out, safe_serialization=True)
    with safe_open(os.path.join(a.out, "model.safetensors"), "pt") as f:
        saved = set(f.keys())
    sd = model.state_dict()
    not_saved = sorted(set(sd) - saved)
    extra_saved = sorted(saved - set(sd))
    n_params = sum(p.numel() for p in model.parameters())

    # ---- feature extractor (laion/clap-htsat-unfused: rand_trunc + repeatpad; fused: fusion + repeatpad)
    fx = ClapFeatureExtractor(truncation=mode, padding="repeatpad")
    fx.save_pretrained(a.out)

    feats_t = {}
    waves = {}
    for ci, (name, nsamp, wseed, sines, env) in enumerate(CLIPS):
        w = make_wave(nsamp, wseed, sines, env)
        waves[name] = w
        feats_t[f"wave.{name}"] = torch.from_numpy(w.astype(np.float16))
        assert np.array_equal(feats_t[f"wave.{name}"].numpy().astype(np.float32), w)
    draw_seeds = {name: 1000 + ci for ci, (name, *_r) in enumerate(CLIPS)}
    per_clip = {}
    feat_stats = {}
    for name, w in waves.items():
        x, l, d = extract(fx, w, mode, draw_seeds[name])
        per_clip[name] = (x, l, d)
        feats_t[f"{mode}.{name}.input_features"] = x.contiguous()
        feats_t[f"{mode}.{name}.is_longer"] = l.contiguous()
        feats_t[f"{mode}.{name}.draws"] = d.contiguous()
        with extractor_in_float64():
            x64, l64, d64 = extract(fx, w, mode, draw_seeds[name])
        assert torch.equal(d64, d) and torch.equal(l64, l)
        feat_stats[f"{mode}.{name}.input_features"] = {"fp32_vs_fp64_pipeline": stats(x, x64)}
    feats_t["mel_filters"] = torch.from_numpy(fx.mel_filters).float().contiguous()
    feats_t["mel_filters_slaney"] = torch.from_numpy(fx.mel_filters_slaney).float().contiguous()
    # the same three clips in ONE extractor call (only its is_longer is used: audio.mixed.*)
    bdraws = []
    np.random.seed(2000)
    with record_draws(bdraws):
        bout = fx([waves[c[0]] for c in CLIPS], sampling_rate=SR, truncation=mode, return_tensors="pt")
    batch_is_longer = bout["is_longer"]
    for bi, (name, *_r) in enumerate(CLIPS[:2]):
        assert torch.equal(bout["input_features"][bi], per_clip[name][0][0]), name

    feats = torch.cat([per_clip[c[0]][0] for c in CLIPS]).contiguous()
    is_longer = torch.cat([per_clip[c[0]][1] for c in CLIPS]).contiguous()
    ids, mask = make_text_inputs(config.text_config.vocab_size, 7)
    if not fused:
        # the unfused audio encoder never reads is_longer: check it on the reference itself
        with torch.no_grad():
            e0 = model.get_audio_features(input_features=feats, is_longer=is_longer).pooler_output
            e1 = model.get_audio_features(input_features=feats, is_longer=torch.zeros_like(is_longer)).pooler_output
        assert torch.equal(e0, e1), "unfused model depends on is_longer"

    # ---- f32 runs (a.threads threads), then 1 thread, then float64
    a32, t32, s32 = all_runs(model, feats, is_longer, ids, mask, fused, batch_is_longer)
    check_finite({**a32, **t32, **s32}, "f32")
    torch.set_num_threads(1)
    a1, t1, s1 = all_runs(model, feats, is_longer, ids, mask, fused, batch_is_longer)
    torch.set_num_threads(a.threads)
    m64 = ClapModel(config).eval()
    m64.load_state_dict(model.state_dict())
    m64 = m64.double()
    a64, t64, s64 = all_runs(m64, feats.double(), is_longer, ids, mask, fused, batch_is_longer)
    check_finite({**a64, **t64, **s64}, "f64")
    del m64

    # ---- reload check: the saved folder reproduces everything bit-exactly
    rmodel = ClapModel.from_pretrained(a.out).eval()
    rfx = ClapFeatureExtractor.from_pretrained(a.out)
    ra, rt, rs = all_runs(rmodel, feats, is_longer, ids, mask, fused, batch_is_longer)
    reload_bad = [k for d0, d1 in ((a32, ra), (t32, rt), (s32, rs)) for k in d0 if not torch.equal(d0[k], d1[k])]
    for name, w in waves.items():
        x, l, d = extract(rfx, w, mode, draw_seeds[name])
        for lbl, u, v in (("input_features", x, per_clip[name][0]), ("is_longer", l, per_clip[name][1]),
                          ("draws", d, per_clip[name][2])):
            if not torch.equal(u, v):
                reload_bad.append(f"{mode}.{name}.{lbl}")
    assert not reload_bad, f"reload differs: {reload_bad}"
    del rmodel

    # ---- assemble files
    files = {"features.safetensors": feats_t, "audio.safetensors": {}, "text.safetensors": {},
             "similarity.safetensors": {}}
    tol = {}
    for fname, d32, d1t, d64 in (("audio.safetensors", a32, a1, a64), ("text.safetensors", t32, t1, t64),
                                 ("similarity.safetensors", s32, s1, s64)):
        out = files[fname]
        for k, v in d32.items():
            out[k] = v.contiguous()
            tol[k] = {"fp32_vs_fp64": stats(v, d64[k]), "fp32_2t_vs_1t": stats(v, d1t[k])}
            if twins == "all" or v.numel() <= SMALL_TWIN_NUMEL:
                out[k + ".f64"] = d64[k].float().contiguous()
    files["audio.safetensors"]["audio.is_longer"] = is_longer
    if fused:
        files["audio.safetensors"]["audio.mixed.is_longer"] = batch_is_longer.contiguous()
    files["text.safetensors"]["text.input_ids"] = ids
    files["text.safetensors"]["text.attention_mask"] = mask
    sim = files["similarity.safetensors"]
    sim["logit_scale_a"] = model.logit_scale_a.detach().clone()
    sim["logit_scale_t"] = model.logit_scale_t.detach().clone()

    # one metadata key: safetensors writes the metadata map in arbitrary order, a single key keeps files byte-stable
    meta = {"generator": f"scripts/ref/make_clap_fixtures.py --config {a.config} (transformers "
                         f"{transformers.__version__}, torch {torch.__version__})"}
    for fname, tens in files.items():
        save_file(tens, os.path.join(a.out, fname), metadata=meta)

    # ---- manifest
    def entry(fname, k, v):
        e = {"file": fname, "shape": list(v.shape), "dtype": st_dtype(v)}
        p = producer(k)
        if p:
            e["producer"] = p
        if k.endswith(".f64"):
            e["note"] = "float64 run (model.double(), inputs as double), rounded to f32 for storage"
        base = k[:-4] if k.endswith(".f64") else k
        if base in tol and not k.endswith(".f64"):
            e["tolerance"] = tol[base]
            if base + ".f64" not in files[fname]:
                e["f64_twin"] = "not stored (size); statistics measured"
        if k in feat_stats:
            e["tolerance"] = feat_stats[k]
        return e

    tensors = {}
    for fname, tens in files.items():
        for k in sorted(tens):
            tensors[k] = entry(fname, k, tens[k])
    # producers of the features file
    for name, (_n, nsamp, wseed, sines, env) in zip(waves, CLIPS):
        tensors[f"wave.{name}"]["producer"] = (
            f"test clip, {nsamp} samples at 48 kHz, mono; multiples of 2^-11 stored exactly as F16 -- convert to "
            f"f32 and feed as is; numpy seed {wseed}, sines {sines}, envelope rate {env} Hz")
        tensors[f"{mode}.{name}.input_features"]["producer"] = (
            f"ClapFeatureExtractor(truncation={mode!r}, padding='repeatpad')(wave.{name} as float32 numpy, "
            f"sampling_rate=48000, return_tensors='pt')['input_features'] after np.random.seed({draw_seeds[name]})")
        tensors[f"{mode}.{name}.is_longer"]["producer"] = "same call, ['is_longer'] (torch.bool)"
        tensors[f"{mode}.{name}.draws"]["producer"] = (
            "numpy draws of the same call, in call order, rows [kind, low, high, value]: kind 0 = "
            "np.random.randint(low, high); kind 1 = np.random.choice(arange(low, high)); see CLAP.md")
    tensors["mel_filters"]["producer"] = "ClapFeatureExtractor.mel_filters (htk, norm=None; used by 'fusion') float64 rounded to f32, [513 freq bins, 64 mels]"
    tensors["mel_filters_slaney"]["producer"] = "ClapFeatureExtractor.mel_filters_slaney (slaney scale, slaney norm; used by 'rand_trunc') float64 rounded to f32, [513, 64]"
    tensors["audio.is_longer"]["producer"] = "input: cat of the per-clip is_longer (torch.bool [3, 1]); audio input_features = cat of features.safetensors <mode>.{short,exact,long}.input_features along dim 0 (not stored again)"
    if fused:
        tensors["audio.mixed.is_longer"]["producer"] = "is_longer returned by ONE extractor call on [short, exact, long] (np seed 2000)"
    tensors["text.input_ids"]["producer"] = "input: <s>=0, random ids in [3, vocab), </s>=2, right-padded with <pad>=1; content lengths 7, 1, 20"
    tensors["text.attention_mask"]["producer"] = "input: 1 on <s>..</s>, 0 on padding"
    tensors["logit_scale_a"]["producer"] = "ClapModel.logit_scale_a (parameter; logits_per_audio use exp of it)"
    tensors["logit_scale_t"]["producer"] = "ClapModel.logit_scale_t (parameter; logits_per_text use exp of it)"

    summary = {}
    for k, v in tol.items():
        summary[k] = {"fp32_vs_fp64_max_abs_over_max_ref": v["fp32_vs_fp64"]["max_abs_over_max_ref"],
                      "fp32_vs_fp64_rms_rel": v["fp32_vs_fp64"]["rms_rel"],
                      "fp32_2t_vs_1t_max_abs": v["fp32_2t_vs_1t"]["max_abs"]}

    ac, tc = config.audio_config, config.text_config
    manifest = {
        "generator": "scripts/ref/make_clap_fixtures.py: transformers ClapModel / ClapFeatureExtractor with random "
                     "weights; transformers computes, the script records (forward hooks, module calls)",
        "command": f"python scripts/ref/make_clap_fixtures.py --config {a.config} --out <out>"
                   + (f" --seed {a.seed}" if a.seed else "") + (f" --twins {a.twins}" if a.twins else ""),
        "transformers": transformers.__version__, "torch": torch.__version__, "numpy": np.__version__,
        "python": platform.python_version(), "threads": a.threads, "seed": a.seed, "device": "cpu",
        "attn_implementation": model.config._attn_implementation,
        "config": a.config, "enable_fusion": fused, "truncation": mode, "padding": "repeatpad",
        "model": {
            "parameters": n_params, "state_dict_entries": len(sd), "saved_tensors": len(saved),
            "state_dict_entries_not_saved": not_saved, "saved_not_in_state_dict": extra_saved,
            "integer_buffers_not_randomized": int_buffers,
            "audio": {k: getattr(ac, k) for k in ("spec_size", "num_mel_bins", "patch_size", "patch_stride",
                                                   "window_size", "patch_embeds_hidden_size", "hidden_size",
                                                   "depths", "num_attention_heads", "enable_fusion", "fusion_type",
                                                   "mlp_ratio", "layer_norm_eps", "hidden_act", "aff_block_r")},
            "text": {k: getattr(tc, k) for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                                                  "num_attention_heads", "intermediate_size",
                                                  "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
                                                  "hidden_act", "pad_token_id")},
            "projection_dim": config.projection_dim,
            "logit_scale_a": model.logit_scale_a.item(), "logit_scale_t": model.logit_scale_t.item(),
        },
        "weights": "seeded (torch.Generator(seed)): LayerNorm/BatchNorm weight 1+0.1N, bias 0.02N; BatchNorm "
                   "running_mean 0.1N, running_var 0.5+U(0,1), except bn0 (audio_encoder.batch_norm, on dB "
                   "log-mels): running_mean c+3N with c = -15 (rand_trunc) / +8 (fusion), running_var 100(0.5+U); Linear/Conv2d weight N/sqrt(fan_in), bias "
                   "0.02N; Embedding 0.5N; relative_position_bias_table 0.5N; logit_scale_a/t log(1/0.07)+0.2N",
        "draw_seeds": {f"{mode}.{k}": v for k, v in draw_seeds.items()},
        "draws": {f"{mode}.{name}": describe_draws(mode, per_clip[name][2].tolist()) for name in waves},
        "batch_extraction": {"is_longer": batch_is_longer.flatten().tolist(), "draws": bdraws, "np_seed": 2000},
        "twins": twins, "small_twin_numel": SMALL_TWIN_NUMEL,
        "reload_check": "ClapModel.from_pretrained(out) and ClapFeatureExtractor.from_pretrained(out) reproduce "
                        "every stored f32 tensor, is_longer and draw bit-exactly",
        "tolerance_note": "fp32_vs_fp64: the reference's own f32 run against its float64 run (unrounded); "
                          "max_abs_over_max_ref = max|f32 - f64| / max|f64|; fp32_2t_vs_1t: the f32 run with "
                          f"{a.threads} vs 1 torch threads. Features: fp32_vs_fp64_pipeline = stored features vs the "
                          "same extractor code with spectrogram(dtype=float64)",
        "files": {f: {"bytes": os.path.getsize(os.path.join(a.out, f))} for f in
                  ["config.json", "model.safetensors", "preprocessor_config.json", *files]},
        "tensors": tensors,
        "tolerance_summary": summary,
    }

    if a.timing:
        manifest["timing_s"] = timing(model, waves["exact"], fx, mode, ids, mask, a.threads)
    manifest["seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")

    # ---- report
    print(f"{a.config}: {n_params} parameters, {len(saved)} saved tensors; not saved: {not_saved}; extra: {extra_saved}")
    for fname, tens in files.items():
        print(f"{fname} ({os.path.getsize(os.path.join(a.out, fname))} bytes)")
        for k in sorted(tens):
            v = tens[k]
            extra = ""
            if v.is_floating_point() and v.numel():
                extra = f" rms {v.double().pow(2).mean().sqrt().item():.3g} max {v.abs().max().item():.3g}"
            if k in tol:
                extra += f"  f32/f64 {tol[k]['fp32_vs_fp64']['max_abs_over_max_ref']:.2e}"
            print(f"  {k} {st_dtype(v)} {list(v.shape)}{extra}")
    if "timing_s" in manifest:
        print("timing", manifest["timing_s"])
    print(f"done in {manifest['seconds']} s")


def timing(model, wave, fx, mode, ids, mask, threads):
    """Wall time (f32, `threads` torch threads, best of several runs) of one 10 s clip through the
    feature extractor and the audio tower (get_audio_features), and of the text tower (get_text_features)."""

    def best(fn, n):
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return min(ts)

    res = {"threads": threads, "statistic": "min over repeats"}
    np.random.seed(0)
    x = fx(wave, sampling_rate=SR, truncation=mode, return_tensors="pt")
    res["feature_extractor_10s"] = best(lambda: fx(wave, sampling_rate=SR, truncation=mode, return_tensors="pt"), 5)
    n_tok = int(mask[2].sum())
    with torch.no_grad():
        model.get_audio_features(**x)  # warm-up
        res["audio_10s_clip"] = best(lambda: model.get_audio_features(**x), 5)
        model.get_text_features(input_ids=ids[2:3, :n_tok], attention_mask=mask[2:3, :n_tok])
        res[f"text_1x{n_tok}_tokens"] = best(
            lambda: model.get_text_features(input_ids=ids[2:3, :n_tok], attention_mask=mask[2:3, :n_tok]), 10)
        res[f"text_3x{ids.shape[1]}_tokens"] = best(lambda: model.get_text_features(input_ids=ids, attention_mask=mask), 10)
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()}


if __name__ == "__main__":
    main()
