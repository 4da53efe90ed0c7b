//! Ops of the text conditioning: Fourier features of scalar conditions and the replacement of
//! masked sequence rows (padding embeddings, the unconditional context).

use super::{f32_data, route};
use crate::backend::Op;
use crate::{threads, Result, Tensor};

/// The layout of [`fourier_features`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FourierLayout {
    /// `[cos(a_0) … cos(a_{F−1}), sin(a_0) … sin(a_{F−1})]` (`ExpoFourierFeatures`, the DiT
    /// timestep embedding): `2F` features.
    CosSin,
    /// `[v, sin(a_0) … sin(a_{F−1}), cos(a_0) … cos(a_{F−1})]` (`LearnedPositionalEmbedding`):
    /// `2F + 1` features.
    ValueSinCos,
}

/// Fourier features of scalars: `values [N]` and `freqs [F]` → `[N, 2F]` (or `[N, 2F + 1]`,
/// see [`FourierLayout`]) f32, with `a_k = ((v · f_k) · 2) · π` evaluated in f32 in that order
/// (π rounded to f32) and its cosine and sine correctly rounded from an f64 evaluation. An op
/// of the set (`fourier_features`).
pub fn fourier_features(values: &Tensor, freqs: &Tensor, layout: FourierLayout) -> Result<Tensor> {
    route!(
        "fourier_features",
        [values, freqs],
        Op::FourierFeatures {
            values: values.clone(),
            freqs: freqs.clone(),
            layout
        }
    )
}

/// The CPU body of [`fourier_features`] (the CPU backend runs it on checked operands).
pub(crate) fn fourier_features_host(
    values: &Tensor,
    freqs: &Tensor,
    layout: FourierLayout,
) -> Result<Tensor> {
    let v = f32_data(values)?;
    let f = f32_data(freqs)?;
    let half = f.len();
    let (dim, off) = match layout {
        FourierLayout::CosSin => (2 * half, 0),
        FourierLayout::ValueSinCos => (2 * half + 1, 1),
    };
    let pi = std::f64::consts::PI as f32;
    let mut out = vec![0f32; v.len() * dim];
    if dim > 0 {
        for (row, &x) in out.chunks_exact_mut(dim).zip(v.iter()) {
            if off == 1 {
                row[0] = x;
            }
            let (first, second) = row[off..].split_at_mut(half);
            for ((p, q), &fk) in first.iter_mut().zip(second.iter_mut()).zip(f.iter()) {
                let a = (((x * fk) * 2.0) * pi) as f64;
                let (s, c) = (a.sin() as f32, a.cos() as f32);
                match layout {
                    FourierLayout::CosSin => (*p, *q) = (c, s),
                    FourierLayout::ValueSinCos => (*p, *q) = (s, c),
                }
            }
        }
    }
    Tensor::from_vec(out, &[v.len(), dim])
}

/// Rows of `x [.., L, D]` whose `mask [.., L]` entry is 0 replaced by `fill [D]` (or by zeros
/// when `fill` is `None`); the other rows are copied unchanged (bit for bit). `mask` may have
/// any dtype (non-zero = keep). An op of the set (`fill_masked_rows`).
pub fn fill_masked_rows(x: &Tensor, mask: &Tensor, fill: Option<&Tensor>) -> Result<Tensor> {
    route!(
        "fill_masked_rows",
        [x, mask, fill],
        Op::FillMaskedRows {
            x: x.clone(),
            mask: mask.clone(),
            fill: fill.cloned()
        }
    )
}

/// The CPU body of [`fill_masked_rows`] (the CPU backend runs it on checked operands).
pub(crate) fn fill_masked_rows_host(
    x: &Tensor,
    mask: &Tensor,
    fill: Option<&Tensor>,
) -> Result<Tensor> {
    let s = x.shape();
    let d = s.last().copied().unwrap_or(0);
    let xc = x.contiguous()?;
    let mut out = f32_data(&xc)?.into_owned();
    let m = f32_data(mask)?;
    let fv = fill.map(f32_data).transpose()?;
    threads::install(|| crate::cpu::layout::fill_masked_rows(&mut out, d, &m, fv.as_deref()));
    Tensor::from_vec(out, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_masked_rows_replaces_only_masked_rows() {
        let x = Tensor::from_vec(
            (0..12).map(|i| i as f32 - 3.5).collect::<Vec<_>>(),
            &[2, 3, 2],
        )
        .unwrap();
        let m = Tensor::from_vec(vec![1u8, 0, 1, 0, 0, 1], &[2, 3]).unwrap();
        let f = Tensor::from_vec(vec![9f32, 8.0], &[2]).unwrap();
        let y = fill_masked_rows(&x, &m, Some(&f)).unwrap();
        assert_eq!(
            y.to_vec::<f32>().unwrap(),
            vec![-3.5, -2.5, 9.0, 8.0, 0.5, 1.5, 9.0, 8.0, 9.0, 8.0, 6.5, 7.5]
        );
        let z = fill_masked_rows(&x, &m, None).unwrap();
        assert_eq!(&z.to_vec::<f32>().unwrap()[2..4], &[0.0, 0.0]);
        assert!(fill_masked_rows(&x, &f, None).is_err());
    }

    #[test]
    fn fourier_layouts() {
        let v = Tensor::from_vec(vec![0f32, 0.25], &[2]).unwrap();
        let f = Tensor::from_vec(vec![1f32, 2.0], &[2]).unwrap();
        let a = fourier_features(&v, &f, FourierLayout::CosSin)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        // v = 0: cos 1, sin 0; v = 0.25, f = 1: a = π/2.
        assert_eq!(&a[..4], &[1.0, 1.0, 0.0, 0.0]);
        assert!(a[4].abs() < 1e-6 && (a[6] - 1.0).abs() < 1e-6);
        let b = fourier_features(&v, &f, FourierLayout::ValueSinCos)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(b.len(), 10);
        assert_eq!(&b[..5], &[0.0, 0.0, 0.0, 1.0, 1.0]);
        assert_eq!(b[5], 0.25);
        assert_eq!(b[6].to_bits(), a[6].to_bits());
        assert_eq!(b[8].to_bits(), a[4].to_bits());
    }
}
