//! The element-wise and row kernels of the bf16 replay: every result computed in f32 and rounded
//! to bf16 once, as PyTorch's CPU kernels do for bf16 tensors.

use rayon::prelude::*;

use super::{round, sum};

/// Gemma's RMSNorm on rows of `d` bf16 values: `x · rsqrt(mean(x²) + eps) · w1p` in f32 (`w1p`
/// holds `1 + w`), rounded once (`(x·w).to(bf16)`, Gemma style), the mean of squares summed in
/// the order of PyTorch's vectorised reduction ([`sum`]). Rows run in parallel on the rayon
/// pool it is called on.
pub fn rms_norm_rows(x: &[f32], w1p: &[f32], d: usize, eps: f32) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    if d == 0 {
        return out;
    }
    out.par_chunks_mut(d).zip(x.par_chunks(d)).for_each_init(
        || vec![0f32; d],
        |sq, (o, r)| {
            for (s, e) in sq.iter_mut().zip(r) {
                *s = e * e;
            }
            let ms = sum(sq) / d as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            for ((o, e), w) in o.iter_mut().zip(r).zip(w1p) {
                *o = round(*e * inv * w);
            }
        },
    );
    out
}

/// Rotary embedding (rotate-half over the whole head) on rows of `d` bf16 values, `n` rows per
/// sequence (row `r` is position `r % n`), with bf16 tables `cos`/`sin` of at least `n` rows:
/// `x·cos + rotate_half(x)·sin` as three bf16 operations (rounded after each product and after
/// the sum). Rows run in parallel on the rayon pool it is called on.
pub fn rope_rows(x: &[f32], cos: &[f32], sin: &[f32], n: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    if d == 0 || n == 0 {
        return out;
    }
    let half = d / 2;
    out.par_chunks_mut(d)
        .zip(x.par_chunks(d))
        .enumerate()
        .for_each(|(row, (o, e))| {
            let p = row % n;
            let (c, sn) = (&cos[p * d..(p + 1) * d], &sin[p * d..(p + 1) * d]);
            for i in 0..half {
                let (a, b) = (e[i], e[i + half]);
                o[i] = round(round(a * c[i]) + round(-b * sn[i]));
                o[i + half] = round(round(b * c[i + half]) + round(a * sn[i + half]));
            }
        });
    out
}

/// `tanh` as SLEEF's vectorised `tanhf` (the reference's) returns it: like the C library's to
/// within an ulp, and exactly ±1 beyond |x| > 8.664339742. Only the saturation shows after bf16
/// rounding: just below −5 the GELU is −0 there, not −1.5e-7.
#[inline]
pub fn tanh(x: f32) -> f32 {
    if x.abs() > 8.664_34 {
        1f32.copysign(x)
    } else {
        x.tanh()
    }
}

/// `gelu_pytorch_tanh` of one value as PyTorch's CPU kernel computes it for bf16 inputs (f32
/// math in this operation order), rounded to bf16.
pub fn gelu_tanh_value(v: f32) -> f32 {
    const BETA: f32 = (std::f64::consts::SQRT_2 * std::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
    const KAPPA: f32 = 0.044715;
    let cube = v * v * v;
    let inner = BETA * (v + KAPPA * cube);
    round(0.5 * v * (1.0 + tanh(inner)))
}

/// [`gelu_tanh_value`] of every bf16 value, indexed by its bits (built once, 256 KiB).
fn gelu_table() -> &'static [f32] {
    static TABLE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| gelu_tanh_value(half::bf16::from_bits(b).to_f32()))
            .collect()
    })
}

/// [`gelu_tanh_value`]; a bf16 input (all of them in a replay) is looked up in a table of the
/// 65 536 possible results.
#[inline]
pub fn gelu_tanh(v: f32) -> f32 {
    let b = half::bf16::from_f32(v);
    if b.to_f32() == v {
        gelu_table()[b.to_bits() as usize]
    } else {
        gelu_tanh_value(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tanh_saturates_like_sleef() {
        assert_eq!(tanh(8.7), 1.0);
        assert_eq!(tanh(-8.7), -1.0);
        assert!(tanh(8.6) < 1.0);
        // Hence the GELU of −5.0625 is −0 in bf16, as the reference computes it.
        assert_eq!(gelu_tanh(-5.0625).to_bits(), (-0f32).to_bits());
    }

    /// The table lookup gives the formula's result for every bf16 input (and non-bf16 inputs
    /// take the formula).
    #[test]
    fn gelu_table_is_the_formula() {
        let v = (0..=u16::MAX)
            .step_by(7)
            .map(|b| half::bf16::from_bits(b).to_f32())
            .filter(|v| v.is_finite())
            .chain([0.123_456_79f32, -3.333_333_3]);
        for x in v {
            assert_eq!(
                gelu_tanh(x).to_bits(),
                gelu_tanh_value(x).to_bits(),
                "gelu({x})"
            );
        }
    }
}
