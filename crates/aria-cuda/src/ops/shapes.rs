//! Shape rules of the device ops (the CPU ops' rules), checked before anything is launched.

use aria_core::ops::KeyMaskMode;
use aria_core::{contiguous_strides, CoreError, Result, Tensor};

use crate::launch::AttnArgs;

/// The checked [`AttnArgs`] of an attention call (the CPU op's shape rules).
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
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        return Err(CoreError::shape(
            "attention",
            "q, k, v must be 4-D [B, H, N, D]",
            &[qs, ks, vs],
        ));
    }
    let (b, h, nq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (nk, dv) = (ks[2], vs[3]);
    if ks[0] != b || ks[1] != h || ks[3] != d || vs[0] != b || vs[1] != h || vs[2] != nk {
        return Err(CoreError::shape(
            "attention",
            "q, k, v disagree",
            &[qs, ks, vs],
        ));
    }
    if let Some((q2, k2)) = diff {
        if q2.shape() != qs || k2.shape() != ks {
            return Err(CoreError::shape(
                "attention_diff",
                "q2 must match q and k2 must match k",
                &[qs, q2.shape(), ks, k2.shape()],
            ));
        }
    }
    if let Some(m) = key_mask {
        if m.shape() != [b, nk] {
            return Err(CoreError::shape(
                "attention",
                "key_mask must be [B, Nk]",
                &[qs, ks, m.shape()],
            ));
        }
    }
    if (window.is_some() || chunk > 0) && nq != nk {
        return Err(CoreError::shape(
            "attention",
            "a window needs Nq == Nk",
            &[qs, ks],
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

/// The rotated width `R` of rope tables `[≥ N, R]` (even, at most `d`).
pub(crate) fn rope_width(
    op: &'static str,
    n: usize,
    d: usize,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<usize> {
    let cs = cos.shape();
    if cs.len() != 2 || cs[0] < n || cs[1] > d || !cs[1].is_multiple_of(2) || sin.shape() != cs {
        return Err(CoreError::shape(
            op,
            "tables must be [>=N, R] with R even, R <= D",
            &[cs, sin.shape()],
        ));
    }
    Ok(cs[1])
}

/// NumPy broadcasting of two shapes.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            match (da, db) {
                _ if da == db || db == 1 => Some(da),
                (1, _) => Some(db),
                _ => None,
            }
        })
        .collect()
}

/// Contiguous strides of `shape` read as `out` (0 on broadcast dimensions).
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let cs = contiguous_strides(shape);
    (0..r)
        .map(|i| {
            if i + shape.len() < r {
                0
            } else {
                let j = i + shape.len() - r;
                if shape[j] == 1 {
                    0
                } else {
                    cs[j]
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aria_core::DType;

    fn t(shape: &[usize]) -> Tensor {
        Tensor::zeros(shape, DType::F32)
    }

    #[test]
    fn broadcasting_matches_numpy() {
        assert_eq!(broadcast_shape(&[2, 1, 4], &[3, 1]), Some(vec![2, 3, 4]));
        assert_eq!(broadcast_shape(&[2, 3], &[4]), None);
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

    #[test]
    fn rope_tables_are_checked() {
        assert_eq!(
            rope_width("rope", 4, 8, &t(&[6, 4]), &t(&[6, 4])).ok(),
            Some(4)
        );
        assert!(rope_width("rope", 4, 8, &t(&[3, 4]), &t(&[3, 4])).is_err());
        assert!(rope_width("rope", 4, 8, &t(&[6, 3]), &t(&[6, 3])).is_err());
        assert!(rope_width("rope", 4, 2, &t(&[6, 4]), &t(&[6, 4])).is_err());
    }
}
