//! Helpers shared by the op tests.
#![allow(clippy::unwrap_used, dead_code)]

use aria_core::Tensor;

/// Deterministic pseudo-normal values (sum of uniforms from a 64-bit LCG).
pub fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 40) as f32) / (1u64 << 24) as f32
    };
    (0..n)
        .map(|_| (next() + next() + next() + next() - 2.0) * 1.7)
        .collect()
}

/// An f32 tensor.
pub fn t(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

/// Max-abs error relative to the reference's max-abs, at most `tol`.
pub fn check(what: &str, got: &[f32], want: &[f64], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut num = 0f64;
    let mut den = 0f64;
    for (g, w) in got.iter().zip(want) {
        // Non-finite values only where the reference has the same one (a running maximum
        // would drop a NaN).
        if !g.is_finite() || !w.is_finite() {
            let same = (g.is_nan() && w.is_nan()) || *g as f64 == *w;
            assert!(same, "{what}: {g} vs {w}");
            continue;
        }
        num = num.max((*g as f64 - w).abs());
        den = den.max(w.abs());
    }
    let err = if den == 0.0 { num } else { num / den };
    assert!(
        err <= tol as f64,
        "{what}: relative error {err:.3e} > {tol:.1e}"
    );
}
