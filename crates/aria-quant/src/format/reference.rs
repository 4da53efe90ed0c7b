//! Test-only: the block quantizers as first written (straightforward scalar code with
//! `f32::round_ties_even`), kept to check that the faster ones produce the same bytes.

use half::f16;

fn rc(v: f32, lo: i32, hi: i32) -> i32 {
    (v.round_ties_even() as i32).clamp(lo, hi)
}

fn f16_up(v: f32) -> f16 {
    let h = f16::from_f32(v);
    if h.to_f32() < v {
        f16::from_bits(h.to_bits() + 1)
    } else {
        h
    }
}

/// Reference `q8_0` block (34 bytes: `d`, 32 × i8).
pub(crate) fn q8_0(x: &[f32]) -> Vec<u8> {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = f16_up(amax / 127.0);
    let df = d.to_f32();
    let id = if df > 0.0 { 1.0 / df } else { 0.0 };
    let mut out = d.to_le_bytes().to_vec();
    out.extend(x.iter().map(|v| rc(v * id, -127, 127) as i8 as u8));
    out
}

fn q4k_fit(x: &[f32]) -> (f32, f32) {
    let lo = x.iter().fold(0f32, |a, &v| a.min(v));
    let hi = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    if hi <= lo {
        return (0.0, -lo);
    }
    let err = |s: f32, m: f32| -> f32 {
        let is = if s > 0.0 { 1.0 / s } else { 0.0 };
        x.iter()
            .map(|&v| {
                let q = rc((v + m) * is, 0, 15) as f32;
                let e = s * q - m - v;
                e * e
            })
            .sum()
    };
    let mut best = ((hi - lo) / 15.0, -lo);
    let mut best_err = err(best.0, best.1);
    let n = x.len() as f32;
    for step in -12..=12 {
        let is = (15.0 + 0.08 * step as f32) / (hi - lo);
        let (mut sq, mut sqq, mut sx, mut sqx) = (0f32, 0f32, 0f32, 0f32);
        for &v in x {
            let q = rc((v - lo) * is, 0, 15) as f32;
            sq += q;
            sqq += q * q;
            sx += v;
            sqx += q * v;
        }
        let det = n * sqq - sq * sq;
        if det <= 0.0 {
            continue;
        }
        let mut s = (n * sqx - sq * sx) / det;
        let mut b = (sqq * sx - sq * sqx) / det;
        if b > 0.0 {
            b = 0.0;
            s = sqx / sqq;
        }
        if s <= 0.0 {
            continue;
        }
        let e = err(s, -b);
        if e < best_err {
            best = (s, -b);
            best_err = e;
        }
    }
    best
}

/// Reference `q4_k` block (144 bytes: `d`, `dmin`, 12 scale bytes, 128 quant bytes).
pub(crate) fn q4k(x: &[f32]) -> Vec<u8> {
    let mut s = [0f32; 8];
    let mut m = [0f32; 8];
    for j in 0..8 {
        (s[j], m[j]) = q4k_fit(&x[32 * j..32 * j + 32]);
    }
    let smax = s.iter().fold(0f32, |a, &v| a.max(v));
    let mmax = m.iter().fold(0f32, |a, &v| a.max(v));
    let d = f16_up(smax / 63.0);
    let dmin = f16_up(mmax / 63.0);
    let (df, dminf) = (d.to_f32(), dmin.to_f32());
    let mut sc = [0u8; 8];
    let mut mq = [0u8; 8];
    for j in 0..8 {
        sc[j] = if df > 0.0 {
            rc(s[j] / df, 0, 63) as u8
        } else {
            0
        };
        mq[j] = if dminf > 0.0 {
            rc(m[j] / dminf, 0, 63) as u8
        } else {
            0
        };
    }
    let mut scales = [0u8; 12];
    for j in 0..4 {
        scales[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        scales[j + 4] = mq[j] | ((mq[j + 4] >> 4) << 6);
        scales[j + 8] = (sc[j + 4] & 0xF) | ((mq[j + 4] & 0xF) << 4);
    }
    let mut q = [0u8; 256];
    for j in 0..8 {
        let d1 = df * sc[j] as f32;
        let m1 = dminf * mq[j] as f32;
        let id = if d1 > 0.0 { 1.0 / d1 } else { 0.0 };
        for l in 0..32 {
            q[32 * j + l] = rc((x[32 * j + l] + m1) * id, 0, 15) as u8;
        }
    }
    let mut out = d.to_le_bytes().to_vec();
    out.extend(dmin.to_le_bytes());
    out.extend(scales);
    for c in 0..4 {
        for l in 0..32 {
            out.push(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
        }
    }
    out
}

fn q6k_fit(x: &[f32]) -> f32 {
    let (mut amax, mut ext) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            ext = v;
        }
    }
    if amax == 0.0 {
        return 0.0;
    }
    let err = |s: f32| -> f32 {
        let is = 1.0 / s;
        x.iter()
            .map(|&v| {
                let e = s * rc(v * is, -32, 31) as f32 - v;
                e * e
            })
            .sum()
    };
    let top = if ext < 0.0 { 32.0 } else { 31.0 };
    let mut best = amax / top;
    let mut best_err = err(best);
    for step in 1..=16 {
        let s = amax / (top - 0.25 * step as f32);
        let e = err(s);
        if e < best_err {
            best = s;
            best_err = e;
        }
    }
    best
}

/// Reference `q6_k` block (210 bytes: 128 `ql`, 64 `qh`, 16 scales, `d`).
pub(crate) fn q6k(x: &[f32]) -> Vec<u8> {
    let mut s = [0f32; 16];
    for (j, sj) in s.iter_mut().enumerate() {
        *sj = q6k_fit(&x[16 * j..16 * j + 16]);
    }
    let smax = s.iter().fold(0f32, |a, &v| a.max(v));
    let d = f16_up(smax / 127.0);
    let df = d.to_f32();
    let mut scales = [0u8; 16];
    let mut q = [0u8; 256];
    for j in 0..16 {
        let sc = if df > 0.0 { rc(s[j] / df, 0, 127) } else { 0 };
        scales[j] = sc as i8 as u8;
        let d1 = df * sc as f32;
        let id = if d1 > 0.0 { 1.0 / d1 } else { 0.0 };
        for l in 0..16 {
            q[16 * j + l] = (rc(x[16 * j + l] * id, -32, 31) + 32) as u8;
        }
    }
    let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
    for h in 0..2 {
        for l in 0..32 {
            let [a, b, c, e] = [0, 32, 64, 96].map(|o| q[128 * h + o + l]);
            ql[64 * h + l] = (a & 0xF) | ((c & 0xF) << 4);
            ql[64 * h + 32 + l] = (b & 0xF) | ((e & 0xF) << 4);
            qh[32 * h + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6);
        }
    }
    let mut out = ql.to_vec();
    out.extend(qh);
    out.extend(scales);
    out.extend(d.to_le_bytes());
    out
}
