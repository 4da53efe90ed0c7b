//! Ops of the text conditioning: Fourier features of scalar conditions and the replacement of
//! masked sequence rows (padding embeddings, the unconditional context).

use super::route;
use crate::backend::Op;
use crate::ops::FourierLayout;
use crate::{Result, Tensor};

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
