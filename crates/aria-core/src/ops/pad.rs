//! Zero padding along one dimension.

use super::{f32_data, route};
use crate::backend::Op;
use crate::{DType, Result, Tensor};

/// `x` with `before` zeros in front of and `after` zeros behind its entries along `dim` (any
/// dtype; a contiguous tensor on the device of `x`). The copied entries keep their bits.
pub fn pad(x: &Tensor, dim: usize, before: usize, after: usize) -> Result<Tensor> {
    route!(
        "pad",
        [x],
        Op::Pad {
            x: x.clone(),
            dim,
            before,
            after
        }
    )
}

/// The CPU body of [`pad`] (the CPU backend runs it on checked operands).
pub(crate) fn pad_host(x: &Tensor, dim: usize, before: usize, after: usize) -> Result<Tensor> {
    // Checked: `dim < rank`.
    let s = x.shape();
    if before == 0 && after == 0 {
        return x.contiguous();
    }
    let mut shape = s.to_vec();
    shape[dim] += before + after;
    if x.dtype() != DType::F32 {
        // Rare (weights are never padded): go through concatenation with zero tensors.
        let mut side = s.to_vec();
        side[dim] = before;
        let zb = Tensor::zeros(&side, x.dtype());
        side[dim] = after;
        let za = Tensor::zeros(&side, x.dtype());
        return Tensor::cat(&[&zb, x, &za], dim);
    }
    let inner: usize = s[dim + 1..].iter().product();
    let outer: usize = s[..dim].iter().product();
    let (src_row, dst_row) = (s[dim] * inner, shape[dim] * inner);
    let xd = f32_data(x)?;
    let mut out = vec![0f32; outer * dst_row];
    if src_row > 0 {
        for (o, src) in out.chunks_mut(dst_row).zip(xd.chunks(src_row)) {
            o[before * inner..before * inner + src_row].copy_from_slice(src);
        }
    }
    Tensor::from_vec(out, &shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_the_middle_dimension_of_a_view() -> Result<()> {
        let x = Tensor::from_vec((0..12).map(|v| v as f32).collect::<Vec<_>>(), &[2, 3, 2])?;
        // A strided view: [2, 2, 3] after the transpose.
        let v = x.transpose(1, 2)?;
        let y = pad(&v, 1, 1, 2)?;
        assert_eq!(y.shape(), &[2, 5, 3]);
        let want = [
            0., 0., 0., 0., 2., 4., 1., 3., 5., 0., 0., 0., 0., 0., 0., //
            0., 0., 0., 6., 8., 10., 7., 9., 11., 0., 0., 0., 0., 0., 0.,
        ];
        assert_eq!(y.to_vec::<f32>()?, want);
        let i = Tensor::from_vec(vec![1i64, 2], &[2])?;
        assert_eq!(pad(&i, 0, 1, 0)?.to_vec::<i64>()?, vec![0, 1, 2]);
        assert!(pad(&x, 3, 1, 1).is_err());
        Ok(())
    }
}
