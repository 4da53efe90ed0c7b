//! Zero padding along one dimension.

use super::route;
use crate::backend::Op;
use crate::{Result, Tensor};

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
