#!/usr/bin/env python3
"""Write the small valid seed inputs of the request, audio, model_config and direction fuzz
targets under fuzz/seeds/ (standard library only). Run from the repository root:
`python3 fuzz/make_seeds.py [fixtures folder]`; the model configurations are copied from the
fixture checkpoints when the folder is given."""

import base64
import json
import math
import os
import shutil
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def tone(n, ch, k=0):
    return [[math.sin(2 * math.pi * (i + 3 * c + k) / 16) * 0.5 for i in range(n)] for c in range(ch)]


def wav(n=32, ch=2, rate=44100, fmt="pcm16"):
    x = tone(n, ch)
    if fmt == "pcm16":
        tag, bits, pack = 1, 16, lambda v: struct.pack("<h", int(v * 32767))
    elif fmt == "pcm24":
        tag, bits, pack = 1, 24, lambda v: struct.pack("<i", int(v * 8388607))[:3]
    else:
        tag, bits, pack = 3, 32, lambda v: struct.pack("<f", v)
    data = b"".join(pack(x[c][i]) for i in range(n) for c in range(ch))
    align = ch * bits // 8
    fmt_chunk = struct.pack("<HHIIHH", tag, ch, rate, rate * align, align, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt_chunk
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


class Bits:
    def __init__(self):
        self.out, self.acc, self.n = bytearray(), 0, 0

    def put(self, v, k):
        for b in range(k - 1, -1, -1):
            self.acc = (self.acc << 1) | ((v >> b) & 1)
            self.n += 1
            if self.n == 8:
                self.out.append(self.acc)
                self.acc, self.n = 0, 0

    def align(self):
        while self.n:
            self.put(0, 1)


def crc(data, poly, width):
    top, mask, r = 1 << (width - 1), (1 << width) - 1, 0
    for byte in data:
        r ^= byte << (width - 8)
        for _ in range(8):
            r = ((r << 1) ^ poly) if r & top else (r << 1)
            r &= mask
    return r


def flac(n=32, ch=2, frames=2):
    """16-bit 44.1 kHz FLAC: a verbatim frame, then constant frames."""
    s = Bits()
    s.put(n, 16), s.put(n, 16), s.put(0, 24), s.put(0, 24)
    s.put(44100, 20), s.put(ch - 1, 3), s.put(15, 5), s.put(n * frames, 36)
    info = bytes(s.out) + bytes(16)
    out = b"fLaC" + bytes([0x80, 0, 0, len(info)]) + info
    x = tone(n, ch)
    for f in range(frames):
        h = Bits()
        h.put(0b11111111111110, 14), h.put(0, 1), h.put(0, 1)
        h.put(6, 4), h.put(9, 4), h.put(ch - 1, 4), h.put(4, 3), h.put(0, 1)
        h.put(f, 8), h.put(n - 1, 8)
        head = bytes(h.out)
        fr = Bits()
        for c in range(ch):
            if f == 0:
                fr.put(0, 1), fr.put(1, 6), fr.put(0, 1)
                for v in x[c]:
                    fr.put(int(v * 32767) & 0xFFFF, 16)
            else:
                fr.put(0, 1), fr.put(0, 6), fr.put(0, 1), fr.put((100 * c) & 0xFFFF, 16)
        fr.align()
        frame = head + bytes([crc(head, 0x07, 8)]) + bytes(fr.out)
        out += frame + struct.pack(">H", crc(frame, 0x8005, 16))
    return out


def safetensors(tensors, meta):
    header, data = {"__metadata__": meta} if meta else {}, b""
    for name, vals in tensors:
        raw = struct.pack("<%df" % len(vals), *vals)
        header[name] = {"dtype": "F32", "shape": [len(vals)],
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def direction(sites):
    entries, tensors = [], []
    for site, width in sites:
        kind, _, block = site.partition(":")
        entries.append({"site": kind, "block": int(block)} if block else {"site": kind})
        stem = "%s.block%s" % (kind, block) if block else kind
        v = [float(i % 3) - 1.0 + 0.25 for i in range(width)]
        norm = math.sqrt(sum(a * a for a in v))
        tensors += [(stem + ".direction", [a / norm for a in v]), (stem + ".mean_norm", [3.5])]
    meta = {
        "format_version": 1, "entries": entries,
        "model": {"dims": {"embed_dim": 8, "depth": 2, "io_channels": 4, "cond_token_dim": 6},
                  "signature": "0123456789abcdef", "weight_checksum": "fedcba9876543210"},
        "method": "synthetic", "positive": {"name": "pos", "count": 2}, "negative": None,
        "strength_convention": "mean-norm", "norm_scope": "valid-latent-tokens",
        "probe_accuracy": [[1, 0.75]], "best_block": 1, "default_strength": 2.0,
    }
    return safetensors(tensors, {"aria.steer": json.dumps(meta)})


def main():
    put("audio", "pcm16_stereo.wav", wav())
    put("audio", "pcm24_mono_48k.wav", wav(24, 1, 48000, "pcm24"))
    put("audio", "f32_mono_22k.wav", wav(16, 1, 22050, "f32"))
    put("audio", "stereo.flac", flac())
    put("audio", "mono.flac", flac(16, 1, 1))

    put("direction", "latent.safetensors", direction([("latent", 4)]))
    put("direction", "three_sites.safetensors",
        direction([("residual:1", 8), ("text", 6), ("latent", 4)]))

    small = wav(8, 1)
    d = direction([("latent", 4)])
    b64 = lambda b: base64.b64encode(b).decode()
    bodies = {
        "minimal.json": {"prompt": "rain"},
        "full.json": {
            "prompt": "a piano", "negative_prompt": "noise", "seconds": 4.5, "steps": 8,
            "cfg": 7.0, "seed": 42, "sampler": "euler",
            "loras": [{"name": "a", "strength": 0.5}],
            "steer": [{"name": "a.safetensors", "site": "residual", "block": 1,
                       "strength": 2.0, "mode": "add", "steps": [0, 3]}],
        },
        "init_b64.json": {"prompt": "drums", "duration": 2,
                          "init_audio": {"data": b64(small), "noise_level": 0.5}},
        "inpaint_b64.json": {"prompt": "birds", "seconds": 3,
                             "inpaint": {"data": b64(small), "ranges": [[0.5, 1.0], [2, 3]]}},
        "steer_b64.json": {"prompt": "x", "steer": [{"data": b64(d), "mode": "project"}]},
        "warm.json": {"prompt": "warm", "warm_start": True, "steps": 200},
    }
    for name, body in bodies.items():
        put("request", name, json.dumps(body))
    put("request", "multipart_init.bin",
        json.dumps({"prompt": "p", "init_audio": {}}).encode() + b"\0init_audio=" + small)
    put("request", "multipart_steer.bin",
        json.dumps({"prompt": "p", "steer": [{}, {"name": "a"}]}).encode()
        + b"\0steer0=" + d)

    if len(sys.argv) > 1:
        for ck in sorted(os.listdir(sys.argv[1])):
            src = os.path.join(sys.argv[1], ck, "model_config.json")
            if os.path.isfile(src):
                os.makedirs(os.path.join(ROOT, "model_config"), exist_ok=True)
                shutil.copy(src, os.path.join(ROOT, "model_config", ck + ".json"))


if __name__ == "__main__":
    main()
