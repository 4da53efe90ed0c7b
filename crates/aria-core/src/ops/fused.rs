//! Fused row ops of the diffusion transformer and its samplers. Each makes one pass over its
//! rows (no intermediate tensors), keeps the `[B, N, E]` token-major layout the linear layers
//! read, and splits work only between independent rows, so results never depend on the thread
//! count.
//!
//! - [`rms_norm_modulate`]: RMSNorm with a gain, then the adaLN modulation `y·(1 + scale) + shift`;
//! - [`gated_residual_add`]: `h + u ⊙ gate`, optionally onto the last tokens only, skipping
//!   masked rows;
//! - [`split_heads`]: a column block of a projection split into head-major `[B, H, N, D]`
//!   operands, with optional per-head RMS QK-norm and rotary embedding;
//! - [`merge_heads`]: `[B, H, N, D]` back to `[B, N, H·D]`, zeroing masked rows;
//! - [`axpby`]: `a_i·x + b_i·y` with one pair of scalars per batch item (sampler updates);
//! - [`apg_guidance`]: classifier-free guidance with the APG projection and the norm clamp.
//!
//! On CPU tensors they run the slice kernels of [`aria_cpu::fused`], which say how each ISA
//! path keeps the same bits.

use super::route;
use crate::backend::Op;
use crate::{Result, Tensor};

/// RMSNorm over the last dimension of `x [B, N, E]` with gain `gamma [E]`, followed when given by
/// the adaLN modulation of batch item `b`: `y·(1 + scale[b]) + shift[b]` (`scale`, `shift`
/// `[B, E]`, any strides, e.g. column views of one `[B, k·E]` projection).
///
/// Per element: `y = x · rsqrt(mean(x²) + eps) · γ` (in that order), then the modulation.
pub fn rms_norm_modulate(
    x: &Tensor,
    gamma: &Tensor,
    eps: f32,
    scale_shift: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    route!(
        "rms_norm_modulate",
        [x, gamma, scale_shift.map(|s| s.0), scale_shift.map(|s| s.1)],
        Op::RmsNormModulate {
            x: x.clone(),
            gamma: gamma.clone(),
            eps,
            scale_shift: scale_shift.map(|(a, b)| (a.clone(), b.clone())),
        }
    )
}

/// The residual update `h + u ⊙ gate[b]` (or `h + u` without a gate) for `h [B, N, E]`.
///
/// `u` is `[B, Nu, E]` with `Nu ≤ N` and is added to the **last** `Nu` tokens of each item (the
/// first `N − Nu` rows pass through: e.g. a local condition that skips the memory tokens).
/// `gate` is the evaluated gate factor `[B, E]` (any strides). Rows whose `row_mask [B, N]`
/// entry is zero keep `h`. Returns a new tensor.
pub fn gated_residual_add(
    h: &Tensor,
    u: &Tensor,
    gate: Option<&Tensor>,
    row_mask: Option<&Tensor>,
) -> Result<Tensor> {
    route!(
        "gated_residual_add",
        [h, u, gate, row_mask],
        Op::GatedResidualAdd {
            h: h.clone(),
            u: u.clone(),
            gate: gate.cloned(),
            row_mask: row_mask.cloned(),
        }
    )
}

/// Split the `heads·head_dim` columns starting at `col` of a projection `x [B, N, W]` into
/// head-major `[B, heads, N, head_dim]` (contiguous, as [`attention`](super::attention())
/// reads it), in one pass per head vector:
/// - `norm = Some((γ [head_dim], eps))`: RMS-normalise each head vector, `v·rsqrt(mean(v²) +
///   eps)·γ`;
/// - `rope = Some((cos, sin))`: then rotate the first `R` dims (rotate-half, position = token
///   index), tables `[≥ N, R]` from [`super::rope_tables`], exactly as [`super::rope`].
pub fn split_heads(
    x: &Tensor,
    col: usize,
    heads: usize,
    head_dim: usize,
    norm: Option<(&Tensor, f32)>,
    rope: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    route!(
        "split_heads",
        [x, norm.map(|n| n.0), rope.map(|r| r.0), rope.map(|r| r.1)],
        Op::SplitHeads {
            x: x.clone(),
            col,
            heads,
            head_dim,
            norm: norm.map(|(g, eps)| (g.clone(), eps)),
            rope: rope.map(|(c, s)| (c.clone(), s.clone())),
        }
    )
}

/// Merge attention heads `x [B, H, N, D]` (any strides) into `[B, N, H·D]`; rows whose
/// `row_mask [B, N]` entry is zero become zeros.
pub fn merge_heads(x: &Tensor, row_mask: Option<&Tensor>) -> Result<Tensor> {
    route!(
        "merge_heads",
        [x, row_mask],
        Op::MergeHeads {
            x: x.clone(),
            row_mask: row_mask.cloned(),
        }
    )
}

/// `a[i]·x + b[i]·y` for batch item `i` (the first dimension of `x` and `y`, which have one
/// shape): the sampler updates (`x − σ·v` is `axpby([1], x, [−σ], v)`, bit for bit).
pub fn axpby(a: &[f32], x: &Tensor, b: &[f32], y: &Tensor) -> Result<Tensor> {
    route!(
        "axpby",
        [x, y],
        Op::Axpby {
            a: a.to_vec(),
            x: x.clone(),
            b: b.to_vec(),
            y: y.clone(),
        }
    )
}

/// Classifier-free guidance with APG, per batch item `i` of `x`, `v_cond`, `v_uncond`
/// `[B, C, T]` at noise level `sigma[i]`, with an optional validity mask `[B, T]` (non-zero =
/// valid):
///
/// ```text
/// d_c = x − σ·v_c,  d_u = x − σ·v_u,  Δ = d_c − d_u
/// Δ ← Δ·min(τ/‖Δ⊙m‖, 1)                                    (norm_threshold τ > 0)
/// Δ⊥ = Δ − (Δ·û)û,  û = d_c⊙m / max(‖d_c⊙m‖, ε)  (⊙m again when masked; ε 1e−8 masked, 1e−12 not)
/// Δ' = apg·Δ⊥ + (1 − apg)·Δ                                 (Δ⊥ alone at apg = 1, Δ at 0)
/// d = d_c + (cfg − 1)·Δ',  v = (x − d)/σ
/// ```
///
/// in f32 with the norms and the dot product accumulated in f64, in element order.
#[allow(clippy::too_many_arguments)]
pub fn apg_guidance(
    x: &Tensor,
    v_cond: &Tensor,
    v_uncond: &Tensor,
    sigma: &[f32],
    mask: Option<&Tensor>,
    cfg_scale: f32,
    apg_scale: f32,
    norm_threshold: f32,
) -> Result<Tensor> {
    route!(
        "apg_guidance",
        [x, v_cond, v_uncond, mask],
        Op::ApgGuidance {
            x: x.clone(),
            v_cond: v_cond.clone(),
            v_uncond: v_uncond.clone(),
            sigma: sigma.to_vec(),
            mask: mask.cloned(),
            cfg_scale,
            apg_scale,
            norm_threshold,
        }
    )
}

/// CFG rescale (the reference's `scale_phi`): the guided velocity `v [B, C, T]` pulled toward
/// the channel spread of the conditional one, `φ·v·(std_c(v_cond)/std_c(v)) + (1 − φ)·v`, with
/// unbiased standard deviations over the channels per item and position (computed in f64, the
/// ratio rounded to f32).
pub fn cfg_rescale(v: &Tensor, v_cond: &Tensor, phi: f32) -> Result<Tensor> {
    route!(
        "cfg_rescale",
        [v, v_cond],
        Op::CfgRescale {
            v: v.clone(),
            v_cond: v_cond.clone(),
            phi,
        }
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ops::{self, RmsStyle};

    fn t(v: Vec<f32>, s: &[usize]) -> Tensor {
        Tensor::from_vec(v, s).unwrap()
    }

    fn seq(n: usize, k: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * k) % 23) as f32 - 11.0) * 0.17)
            .collect()
    }

    #[test]
    fn norm_modulate_matches_composed_ops() {
        let (b, n, e) = (2, 3, 5);
        let x = t(seq(b * n * e, 7), &[b, n, e]);
        let g = t(seq(e, 3), &[e]);
        let p = t(seq(b * 3 * e, 5), &[b, 3 * e]);
        let (sc, sh) = (p.narrow(1, e, e).unwrap(), p.narrow(1, 2 * e, e).unwrap());
        let got = rms_norm_modulate(&x, &g, 1e-5, Some((&sc, &sh))).unwrap();
        let y = ops::rms_norm(&x, Some(&g), 1e-5, RmsStyle::Plain).unwrap();
        let want = ops::add(
            &ops::mul(
                &y,
                &ops::add_scalar(&sc, 1.0).unwrap().unsqueeze(1).unwrap(),
            )
            .unwrap(),
            &sh.contiguous().unwrap().unsqueeze(1).unwrap(),
        )
        .unwrap();
        assert_eq!(got.to_vec_f32().unwrap(), want.to_vec_f32().unwrap());
        let plain = rms_norm_modulate(&x, &g, 1e-5, None).unwrap();
        assert_eq!(plain.to_vec_f32().unwrap(), y.to_vec_f32().unwrap());
        assert!(rms_norm_modulate(&x, &t(vec![1.0; 4], &[4]), 1e-5, None).is_err());
    }

    #[test]
    fn residual_add_gate_tail_and_mask() {
        let (b, n, e) = (2, 3, 2);
        let h = t(seq(b * n * e, 5), &[b, n, e]);
        let u = t(seq(b * n * e, 3), &[b, n, e]);
        let g = t(seq(b * e, 7), &[b, e]);
        let got = gated_residual_add(&h, &u, Some(&g), None).unwrap();
        let want = ops::add(&h, &ops::mul(&u, &g.unsqueeze(1).unwrap()).unwrap()).unwrap();
        assert_eq!(got.to_vec_f32().unwrap(), want.to_vec_f32().unwrap());
        // Tail: u of 1 token lands on the last token of each item only.
        let u1 = t(vec![1.0, 2.0, 3.0, 4.0], &[b, 1, e]);
        let got = gated_residual_add(&h, &u1, None, None)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let hv = h.to_vec_f32().unwrap();
        for (i, (a, o)) in got.iter().zip(&hv).enumerate() {
            let (bi, p, c) = (i / (n * e), (i / e) % n, i % e);
            let add = if p == n - 1 {
                (bi * e + c + 1) as f32
            } else {
                0.0
            };
            assert_eq!(*a, o + add);
        }
        // Masked rows keep h.
        let m = t(vec![1.0, 0.0, 1.0, 1.0, 1.0, 0.0], &[b, n]);
        let got = gated_residual_add(&h, &u, None, Some(&m))
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert_eq!(got[2..4], hv[2..4]);
        assert_eq!(got[10..12], hv[10..12]);
        assert_ne!(got[0..2], hv[0..2]);
    }

    #[test]
    fn split_norm_rope_and_merge_match_ops() {
        let (b, n, h, d) = (2, 3, 2, 4);
        let e = h * d;
        let src = t(seq(b * n * 2 * e, 7), &[b, n, 2 * e]);
        let gamma = t(vec![0.5, 1.0, 1.5, 2.0], &[d]);
        let (c, s) = ops::rope_tables(&t(vec![0.25], &[1]), n).unwrap();
        let got = split_heads(&src, e, h, d, Some((&gamma, 1e-6)), Some((&c, &s))).unwrap();
        // Reference: a [B, H, N, D] view, rms_norm, rope.
        let view = src
            .narrow(2, e, e)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape(&[b, n, h, d])
            .unwrap()
            .permute(&[0, 2, 1, 3])
            .unwrap();
        let normed = ops::rms_norm(&view, Some(&gamma), 1e-6, RmsStyle::Plain).unwrap();
        let want = ops::rope(&normed, &c, &s).unwrap();
        assert_eq!(got.to_vec_f32().unwrap(), want.to_vec_f32().unwrap());
        let plain = split_heads(&src, e, h, d, None, None).unwrap();
        assert_eq!(plain.to_vec_f32().unwrap(), view.to_vec_f32().unwrap());
        // Merge inverts the split; a zero mask row is zero.
        let merged = merge_heads(&plain, None).unwrap();
        assert_eq!(
            merged.to_vec_f32().unwrap(),
            src.narrow(2, e, e).unwrap().to_vec_f32().unwrap()
        );
        let m = t(vec![1.0, 1.0, 0.0, 1.0, 1.0, 1.0], &[b, n]);
        let mz = merge_heads(&plain, Some(&m)).unwrap().to_vec_f32().unwrap();
        assert!(mz[2 * e..3 * e].iter().all(|v| *v == 0.0));
        assert_eq!(mz[..2 * e], merged.to_vec_f32().unwrap()[..2 * e]);
        assert!(split_heads(&src, e + 1, h, d, None, None).is_err());
    }

    #[test]
    fn axpby_per_item() {
        let x = t(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]);
        let y = t(vec![10.0, 20.0, 30.0, 40.0], &[2, 2]);
        let z = axpby(&[1.0, 2.0], &x, &[-0.5, 0.25], &y).unwrap();
        assert_eq!(z.to_vec_f32().unwrap(), vec![-4.0, -8.0, 13.5, 18.0]);
        assert!(axpby(&[1.0], &x, &[1.0], &y).is_err());
    }

    #[test]
    fn guidance_vanilla_and_apg() {
        let x = t(vec![1.0, 2.0], &[1, 1, 2]);
        let vc = t(vec![0.5, 0.5], &[1, 1, 2]);
        let vu = t(vec![0.1, 0.9], &[1, 1, 2]);
        // Vanilla CFG: v = v_u + cfg·(v_c − v_u).
        let v = apg_guidance(&x, &vc, &vu, &[0.5], None, 3.0, 0.0, 0.0)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert!((v[0] - (0.1 + 3.0 * 0.4)).abs() < 1e-6);
        assert!((v[1] - (0.9 - 3.0 * 0.4)).abs() < 1e-6);
        // Δ parallel to d_c: APG removes all guidance.
        let x = t(vec![1.0, 1.0], &[1, 1, 2]);
        let zero = t(vec![0.0, 0.0], &[1, 1, 2]);
        let one = t(vec![1.0, 1.0], &[1, 1, 2]);
        let v = apg_guidance(&x, &zero, &one, &[0.5], None, 5.0, 1.0, 0.0)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert!(v.iter().all(|v| v.abs() < 1e-6), "{v:?}");
        // The masked form zeroes padded positions of the guidance term.
        let m = t(vec![1.0, 0.0], &[1, 2]);
        let vu = t(vec![1.0, 0.0], &[1, 1, 2]);
        let v = apg_guidance(&x, &zero, &vu, &[0.5], Some(&m), 5.0, 1.0, 0.0)
            .unwrap()
            .to_vec_f32()
            .unwrap();
        assert!(v[1].abs() < 1e-6);
    }

    #[test]
    fn same_bits_for_any_thread_count() {
        let (b, n, e) = (2, 37, 64);
        let x = t(seq(b * n * e, 11), &[b, n, e]);
        let g = t(seq(e, 3), &[e]);
        let p = t(seq(b * 2 * e, 5), &[b, 2 * e]);
        let (sc, sh) = (p.narrow(1, 0, e).unwrap(), p.narrow(1, e, e).unwrap());
        let run = || {
            let y = rms_norm_modulate(&x, &g, 1e-5, Some((&sc, &sh))).unwrap();
            let q = split_heads(
                &y,
                0,
                4,
                16,
                Some((&g.narrow(0, 0, 16).unwrap(), 1e-6)),
                None,
            )
            .unwrap();
            let m = merge_heads(&q, None).unwrap();
            gated_residual_add(&x, &m, Some(&sc), None)
                .unwrap()
                .to_vec_f32()
                .unwrap()
        };
        let one = crate::threads::with_threads(1, run).unwrap();
        let three = crate::threads::with_threads(3, run).unwrap();
        assert_eq!(one, three);
    }
}
