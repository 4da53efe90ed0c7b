// Flash-style scaled-dot-product attention: one invocation per query, QW queries per
// workgroup (all of one batch·head, workgroup y), keys and values streamed through
// workgroup memory TK at a time with an online (running max) softmax, so memory stays
// O(tile) whatever the sequence length and scores are never stored.
//
// The CPU op's semantics (aria_core::ops::attention):
// - scores s = scale·q·k, soft-capped c·tanh(s/c) when softcap > 0;
// - a key mask [B, Nk] (non-zero = valid) in mode 0 ("zero values": masked keys keep their
//   weight in the denominator but add no value, PyTorch SDPA after v ← v ⊙ mask) or mode 1
//   ("exclude": masked keys leave the softmax; a query with no valid key outputs zeros);
// - a band: query i sees keys i − wl ..= i + wr only (e.g. the ±17 band of the SAME codec);
//   chunked attention is plain attention over chunk-sized batch items;
// - differential: softmax(q·kᵀ) − softmax(q2·k2ᵀ), both times the same v (DIFF = 1).
// q, k, v (and q2, k2) are read through their 4-D strides [B, H, N, D], so head-split views
// need no copy; the output [B, H, Nq, Dv] is contiguous.
// Constants: QW (queries per workgroup), TK (keys per tile), MAXD ≥ D, MAXDV ≥ Dv, DIFF.

struct Params {
    h: u32,
    nq: u32,
    nk: u32,
    d: u32,
    dv: u32,
    scale: f32,
    softcap: f32,
    mask_mode: u32,
    has_mask: u32,
    banded: u32,
    wl: u32,
    wr: u32,
    m_off: u32,
    bh0: u32,
    _p0: u32,
    _p1: u32,
    // Strides [B, H, N, D] of each operand, then its offset (elements).
    q_s: vec4<u32>,
    k_s: vec4<u32>,
    v_s: vec4<u32>,
    q2_s: vec4<u32>,
    k2_s: vec4<u32>,
    q_off: u32,
    k_off: u32,
    v_off: u32,
    q2_off: u32,
    k2_off: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> q2: array<f32>;
@group(0) @binding(5) var<storage, read> k2: array<f32>;
@group(0) @binding(6) var<storage, read> mask: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

var<workgroup> ks: array<f32, TK * MAXD>;
var<workgroup> k2s: array<f32, TK * MAXD * DIFF + 1u>;
var<workgroup> vs: array<f32, TK * MAXDV>;
var<workgroup> valid_s: array<u32, TK>;

const NEG_INF: f32 = -3.4028235e38;

fn at(off: u32, s: vec4<u32>, b: u32, h: u32, n: u32, c: u32) -> u32 {
    return off + b * s.x + h * s.y + n * s.z + c * s.w;
}

fn capped(s: f32) -> f32 {
    let t = s * p.scale;
    if (p.softcap > 0.0) {
        return p.softcap * tanh_f(t / p.softcap);
    }
    return t;
}

// The keys query i sees: [lo, hi).
fn visible(i: u32) -> vec2<u32> {
    if (p.banded == 0u) {
        return vec2<u32>(0u, p.nk);
    }
    let lo = select(0u, i - p.wl, i > p.wl);
    let hi = min(i + p.wr + 1u, p.nk);
    return vec2<u32>(lo, max(hi, lo));
}

@compute @workgroup_size(QW, 1, 1)
fn attention(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let bh = p.bh0 + wg.y;
    let bi = bh / p.h;
    let hi_ = bh % p.h;
    let i0 = wg.x * QW;
    let i = i0 + lid.x;
    let live = i < p.nq;
    let ilast = min(i0 + QW, p.nq) - 1u;
    let range_lo = visible(i0).x;
    let range_hi = visible(ilast).y;
    var mine = vec2<u32>(0u, 0u);
    if (live) {
        mine = visible(i);
    }

    var qr: array<f32, MAXD>;
    var q2r: array<f32, MAXD>;
    for (var c = 0u; c < p.d; c = c + 1u) {
        if (live) {
            qr[c] = q[at(p.q_off, p.q_s, bi, hi_, i, c)];
            if (DIFF == 1u) {
                q2r[c] = q2[at(p.q2_off, p.q2_s, bi, hi_, i, c)];
            }
        }
    }
    var acc: array<f32, MAXDV>;
    var acc2: array<f32, MAXDV>;
    var m1 = NEG_INF;
    var l1 = 0.0;
    var m2 = NEG_INF;
    var l2 = 0.0;
    var s1: array<f32, TK>;
    var s2: array<f32, TK>;

    for (var j0 = range_lo; j0 < range_hi; j0 = j0 + TK) {
        let nt = min(TK, range_hi - j0);
        workgroupBarrier();
        for (var x = lid.x; x < nt * p.d; x = x + QW) {
            let t = x / p.d;
            let c = x % p.d;
            ks[t * MAXD + c] = k[at(p.k_off, p.k_s, bi, hi_, j0 + t, c)];
            if (DIFF == 1u) {
                k2s[t * MAXD + c] = k2[at(p.k2_off, p.k2_s, bi, hi_, j0 + t, c)];
            }
        }
        for (var x = lid.x; x < nt * p.dv; x = x + QW) {
            let t = x / p.dv;
            let c = x % p.dv;
            vs[t * MAXDV + c] = v[at(p.v_off, p.v_s, bi, hi_, j0 + t, c)];
        }
        for (var t = lid.x; t < nt; t = t + QW) {
            var ok = 1u;
            if (p.has_mask != 0u && mask[p.m_off + bi * p.nk + j0 + t] == 0.0) {
                ok = 0u;
            }
            valid_s[t] = ok;
        }
        workgroupBarrier();
        // Barriers above stay in uniform control flow: idle invocations skip only this.
        if (live) {
            // Scores of this tile; `seen` keys only (−∞ marks the others).
            var tmax1 = NEG_INF;
            var tmax2 = NEG_INF;
            for (var t = 0u; t < nt; t = t + 1u) {
                let j = j0 + t;
                let seen = j >= mine.x && j < mine.y && !(p.mask_mode == 1u && valid_s[t] == 0u);
                var a = NEG_INF;
                var b = NEG_INF;
                if (seen) {
                    var d1 = 0.0;
                    for (var c = 0u; c < p.d; c = c + 1u) {
                        d1 = fma(qr[c], ks[t * MAXD + c], d1);
                    }
                    a = capped(d1);
                    if (DIFF == 1u) {
                        var d2 = 0.0;
                        for (var c = 0u; c < p.d; c = c + 1u) {
                            d2 = fma(q2r[c], k2s[t * MAXD + c], d2);
                        }
                        b = capped(d2);
                    }
                }
                s1[t] = a;
                s2[t] = b;
                tmax1 = max(tmax1, a);
                tmax2 = max(tmax2, b);
            }
            // First softmax.
            let mn1 = max(m1, tmax1);
            if (tmax1 > NEG_INF) {
                let alpha = select(exp(m1 - mn1), 0.0, m1 == NEG_INF);
                l1 = l1 * alpha;
                for (var c = 0u; c < p.dv; c = c + 1u) {
                    acc[c] = acc[c] * alpha;
                }
                for (var t = 0u; t < nt; t = t + 1u) {
                    if (s1[t] > NEG_INF) {
                        let e = exp(s1[t] - mn1);
                        l1 = l1 + e;
                        if (valid_s[t] != 0u) {
                            for (var c = 0u; c < p.dv; c = c + 1u) {
                                acc[c] = fma(e, vs[t * MAXDV + c], acc[c]);
                            }
                        }
                    }
                }
                m1 = mn1;
            }
            if (DIFF == 1u) {
                let mn2 = max(m2, tmax2);
                if (tmax2 > NEG_INF) {
                    let alpha = select(exp(m2 - mn2), 0.0, m2 == NEG_INF);
                    l2 = l2 * alpha;
                    for (var c = 0u; c < p.dv; c = c + 1u) {
                        acc2[c] = acc2[c] * alpha;
                    }
                    for (var t = 0u; t < nt; t = t + 1u) {
                        if (s2[t] > NEG_INF) {
                            let e = exp(s2[t] - mn2);
                            l2 = l2 + e;
                            if (valid_s[t] != 0u) {
                                for (var c = 0u; c < p.dv; c = c + 1u) {
                                    acc2[c] = fma(e, vs[t * MAXDV + c], acc2[c]);
                                }
                            }
                        }
                    }
                    m2 = mn2;
                }
            }
        }
    }
    if (!live) {
        return;
    }
    let inv1 = select(0.0, 1.0 / l1, l1 > 0.0);
    let inv2 = select(0.0, 1.0 / l2, l2 > 0.0);
    let o = (bh * p.nq + i) * p.dv;
    for (var c = 0u; c < p.dv; c = c + 1u) {
        var r = acc[c] * inv1;
        if (DIFF == 1u) {
            r = r - acc2[c] * inv2;
        }
        out[o + c] = r;
    }
}
