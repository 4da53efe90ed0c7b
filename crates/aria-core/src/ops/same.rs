//! Ops of the SAME autoencoder's transformer blocks: the fused head split with DyT QK-norm and
//! partial rotary embedding, rotary tables at absolute positions, and the per-row standard
//! deviation of the SoftNorm bottleneck noise.

use super::route;
use crate::backend::Op;
use crate::ops::HeadNorm;
use crate::{Result, Tensor};

/// Rotary tables for positions `pos0 .. pos0 + n`: `[2, n, 2F]` (`cos` then `sin` of
/// `[p·f ; p·f]`, `f = inv_freq [F]`, computed in f32 as the reference does). The angle of a
/// position depends on the position alone, never on `pos0`, so tables for windows of a longer
/// sequence reproduce its rows bit for bit. Pass `table.get(0)` and `table.get(1)` as the
/// `cos, sin` of [`qkv_heads`] or [`crate::ops::rope`].
pub fn rope_table(inv_freq: &Tensor, pos0: usize, n: usize) -> Result<Tensor> {
    route!(
        "rope_table",
        [inv_freq],
        Op::RopeTable {
            inv_freq: inv_freq.clone(),
            pos0,
            n
        }
    )
}

/// Projection `part` of a fused projection `x [B, N, parts·H·Dh]` (the `part`-th block of
/// `H·Dh` features of every token) as heads `[B, H, N, Dh]`, each head row optionally normed
/// (`norm`, DyT over `Dh`) and then rotated (`rope`: `cos, sin [≥N, R]` from [`rope_table`],
/// rotate-half on the first `R` dims; row `t` of the tables is token `t`). One pass over the
/// data; every output row depends only on its own input row.
pub fn qkv_heads(
    x: &Tensor,
    parts: usize,
    part: usize,
    heads: usize,
    norm: Option<HeadNorm<'_>>,
    rope: Option<(&Tensor, &Tensor)>,
) -> Result<Tensor> {
    route!(
        "qkv_heads",
        [
            x,
            norm.map(|n| n.gamma),
            norm.map(|n| n.beta),
            rope.map(|r| r.0),
            rope.map(|r| r.1)
        ],
        Op::QkvHeads {
            x: x.clone(),
            parts,
            part,
            heads,
            alpha: norm.map_or(0.0, |n| n.alpha),
            norm: norm.map(|n| (n.gamma.clone(), n.beta.clone())),
            rope: rope.map(|(c, s)| (c.clone(), s.clone())),
        }
    )
}

/// Unbiased standard deviation over the last dimension, `[.., L]` → `[.., 1]`: per row
/// `sqrt(Σ(x − m)² / (L − 1))` with `m = Σx / L`, both sums sequential in f32 (a row of one
/// element gives NaN, as the reference does).
pub fn std_last(x: &Tensor) -> Result<Tensor> {
    route!("std_last", [x], Op::StdLast { x: x.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_match_a_plain_split_then_dyt_and_rope() -> Result<()> {
        let (b, n, parts, h, dh) = (2, 5, 3, 2, 8);
        let x: Vec<f32> = (0..b * n * parts * h * dh)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let xt = Tensor::from_vec(x.clone(), &[b, n, parts * h * dh])?;
        let gamma = Tensor::from_vec(
            (0..dh).map(|i| 0.5 + i as f32 / 8.0).collect::<Vec<_>>(),
            &[dh],
        )?;
        let beta = Tensor::from_vec((0..dh).map(|i| i as f32 / 16.0).collect::<Vec<_>>(), &[dh])?;
        let inv = Tensor::from_vec(vec![1.0f32, 0.25], &[2])?;
        let tab = rope_table(&inv, 3, n)?;
        let (c, s) = (tab.get(0)?, tab.get(1)?);
        let norm = HeadNorm {
            alpha: 0.7,
            gamma: &gamma,
            beta: &beta,
        };
        let got = qkv_heads(&xt, parts, 1, h, Some(norm), Some((&c, &s)))?;
        // The same through the general ops: a view of part 1 as [B, H, N, Dh], DyT, RoPE.
        let view = xt
            .reshape(&[b, n, parts, h, dh])?
            .narrow(2, 1, 1)?
            .reshape(&[b, n, h, dh])?
            .permute(&[0, 2, 1, 3])?
            .contiguous()?;
        let normed = crate::ops::dyt(&view, 0.7, &gamma, &beta)?;
        let want = crate::ops::rope(&normed, &c, &s)?;
        assert_eq!(got.shape(), &[b, h, n, dh]);
        assert_eq!(got.to_vec::<f32>()?, want.to_vec::<f32>()?);
        let plain = qkv_heads(&xt, parts, 2, h, None, None)?;
        let want = xt
            .reshape(&[b, n, parts, h, dh])?
            .narrow(2, 2, 1)?
            .reshape(&[b, n, h, dh])?
            .permute(&[0, 2, 1, 3])?
            .contiguous()?;
        assert_eq!(plain.to_vec::<f32>()?, want.to_vec::<f32>()?);
        assert!(qkv_heads(&xt, parts, 3, h, None, None).is_err());
        Ok(())
    }

    #[test]
    fn rope_rows_do_not_depend_on_the_start() -> Result<()> {
        let inv = Tensor::from_vec(vec![1.0f32, 0.1, 0.01], &[3])?;
        let whole = rope_table(&inv, 0, 40)?;
        let part = rope_table(&inv, 17, 9)?;
        for k in 0..2 {
            let w = whole.get(k)?.narrow(0, 17, 9)?.contiguous()?;
            assert_eq!(
                w.to_vec::<f32>()?,
                part.get(k)?.contiguous()?.to_vec::<f32>()?
            );
        }
        let (c, s) = crate::ops::rope_tables(&inv, 40)?;
        assert_eq!(
            c.to_vec::<f32>()?,
            whole.get(0)?.contiguous()?.to_vec::<f32>()?
        );
        assert_eq!(
            s.to_vec::<f32>()?,
            whole.get(1)?.contiguous()?.to_vec::<f32>()?
        );
        Ok(())
    }

    /// A banded attention row gives the same bits in any sequence that holds its whole band,
    /// wherever that sequence starts (what windowed decoding of SAME-L relies on).
    #[test]
    fn band_attention_rows_do_not_depend_on_the_sequence_start() -> Result<()> {
        let (n, d, band) = (150, 64, 17);
        let val = |i: usize, s: usize| ((i * s % 211) as f32 - 105.0) / 80.0;
        let q = Tensor::from_vec(
            (0..n * d).map(|i| val(i, 37)).collect::<Vec<_>>(),
            &[1, 1, n, d],
        )?;
        let k = Tensor::from_vec(
            (0..n * d).map(|i| val(i, 53)).collect::<Vec<_>>(),
            &[1, 1, n, d],
        )?;
        let v = Tensor::from_vec(
            (0..n * d).map(|i| val(i, 71)).collect::<Vec<_>>(),
            &[1, 1, n, d],
        )?;
        let opts = crate::ops::AttnOpts {
            window: Some((band, band)),
            ..crate::ops::AttnOpts::new(0.125)
        };
        for isa in crate::cpu::Isa::available() {
            crate::cpu::with_isa(isa, || -> Result<()> {
                let whole = crate::ops::attention(&q, &k, &v, &opts)?.to_vec::<f32>()?;
                for (lo, len) in [(1, 90), (23, 67), (40, 110), (7, 143)] {
                    let part = |t: &Tensor| t.narrow(2, lo, len);
                    let got = crate::ops::attention(&part(&q)?, &part(&k)?, &part(&v)?, &opts)?
                        .to_vec::<f32>()?;
                    for i in lo + band..lo + len - band {
                        let (a, b) = (
                            &got[(i - lo) * d..(i - lo + 1) * d],
                            &whole[i * d..(i + 1) * d],
                        );
                        assert!(
                            a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
                            "{isa:?}: row {i} differs in the window starting at {lo}"
                        );
                    }
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    #[test]
    fn std_last_is_the_unbiased_std() -> Result<()> {
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0], &[2, 4])?;
        let s = std_last(&x)?;
        assert_eq!(s.shape(), &[2, 1]);
        let v = s.to_vec::<f32>()?;
        assert!((v[0] - (5.0f32 / 3.0).sqrt()).abs() < 1e-6 && v[1] == 0.0);
        Ok(())
    }
}
