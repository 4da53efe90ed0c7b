//! Launch arguments from checked shapes. The shape rules themselves are the op set's
//! ([`aria_tensor::backend::check`]); nothing here re-states them.

use aria_tensor::backend::check::{attention_dims, AttnDims};
use aria_tensor::options::KeyMaskMode;
use aria_tensor::{CoreError, Result, Tensor};

use crate::launch::AttnArgs;

/// The [`AttnArgs`] of an attention call: the sizes from the op set's check step
/// ([`attention_dims`]); the one rule of this backend's own is that a key-chunked launch
/// (`chunk > 0`) needs `Nq == Nk`.
#[allow(clippy::too_many_arguments)]
pub fn attention_args(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    diff: Option<(&Tensor, &Tensor)>,
    scale: f32,
    softcap: Option<f32>,
    key_mask: Option<&Tensor>,
    mask_mode: KeyMaskMode,
    window: Option<(usize, usize)>,
    chunk: usize,
) -> Result<AttnArgs> {
    let AttnDims {
        b,
        h,
        nq,
        nk,
        d,
        dv,
    } = attention_dims(q, k, v, diff, key_mask, window)?;
    if chunk > 0 && nq != nk {
        return Err(CoreError::shape(
            "attention",
            "a key-chunked launch needs Nq == Nk",
            &[q.shape(), k.shape()],
        ));
    }
    let (wl, wr) = window.unwrap_or((0, 0));
    Ok(AttnArgs {
        b: b as u64,
        h: h as u64,
        nq: nq as u64,
        nk: nk as u64,
        d: d as u64,
        dv: dv as u64,
        scale,
        softcap: softcap.unwrap_or(0.0),
        mask_mode: match mask_mode {
            KeyMaskMode::ZeroValues => 0,
            KeyMaskMode::Exclude => 1,
        },
        banded: i32::from(window.is_some()),
        wl: wl as u64,
        wr: wr as u64,
        chunk: chunk as u64,
        tk: 0,
    })
}

/// The rotated width `R` of rope tables `[≥ N, R]` the check step accepted.
pub(crate) fn table_width(cos: &Tensor) -> usize {
    cos.shape().get(1).copied().unwrap_or(0)
}

/// Contiguous strides of `shape` read as `out` (0 on broadcast dimensions): the check step's
/// helper, shared with the CPU body.
pub use aria_tensor::backend::check::broadcast_strides;

#[cfg(test)]
mod tests {
    use super::*;
    use aria_tensor::DType;

    fn t(shape: &[usize]) -> Tensor {
        Tensor::zeros(shape, DType::F32)
    }

    #[test]
    fn broadcast_strides_read_views() {
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4]), vec![0, 1, 0]);
        assert_eq!(broadcast_strides(&[2, 1, 4], &[2, 3, 4]), vec![4, 0, 1]);
    }

    #[test]
    fn attention_args_follow_the_cpu_rules() {
        let (q, k, v) = (t(&[2, 3, 5, 8]), t(&[2, 3, 5, 8]), t(&[2, 3, 5, 4]));
        let a = attention_args(
            &q,
            &k,
            &v,
            None,
            0.5,
            Some(30.0),
            None,
            KeyMaskMode::Exclude,
            Some((17, 17)),
            0,
        )
        .expect("valid");
        assert_eq!((a.b, a.h, a.nq, a.nk, a.d, a.dv), (2, 3, 5, 5, 8, 4));
        assert_eq!(
            (a.banded, a.wl, a.wr, a.mask_mode, a.softcap),
            (1, 17, 17, 1, 30.0)
        );
        // A key mask must be [B, Nk]; a band needs Nq == Nk; differential halves must match.
        let bad_mask = t(&[2, 4]);
        assert!(attention_args(
            &q,
            &k,
            &v,
            None,
            1.0,
            None,
            Some(&bad_mask),
            KeyMaskMode::ZeroValues,
            None,
            0
        )
        .is_err());
        let k7 = t(&[2, 3, 7, 8]);
        let v7 = t(&[2, 3, 7, 4]);
        assert!(attention_args(
            &q,
            &k7,
            &v7,
            None,
            1.0,
            None,
            None,
            KeyMaskMode::ZeroValues,
            Some((1, 1)),
            0
        )
        .is_err());
        assert!(attention_args(
            &q,
            &k7,
            &v7,
            None,
            1.0,
            None,
            None,
            KeyMaskMode::ZeroValues,
            None,
            0
        )
        .is_ok());
        let q2 = t(&[2, 3, 5, 4]);
        let e = attention_args(
            &q,
            &k,
            &v,
            Some((&q2, &k)),
            1.0,
            None,
            None,
            KeyMaskMode::ZeroValues,
            None,
            0,
        );
        assert!(
            matches!(
                e,
                Err(CoreError::Shape {
                    op: "attention_diff",
                    ..
                })
            ),
            "{e:?}"
        );
    }
}
