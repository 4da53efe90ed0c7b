//! Rows equal bit for bit, found once: [`distinct_rows`] and [`DistinctRows::expand`].
//!
//! A row-wise computation (linear layers, activations, per-row norms) gives equal results for
//! equal rows, so a model may compute only the distinct rows and copy the results out. Whether
//! the rows are looked at is the backend's choice: on the CPU they are read and hashed; a
//! device backend keeps its data where it is and shares nothing unless it implements
//! [`Backend::distinct_rows`](crate::Backend::distinct_rows). The model code is the same either
//! way, and so are the results: the copies are exact ([`crate::ops::embedding`] of the rows).

use crate::{CoreError, DType, Result, Tensor};

/// The distinct rows of a `[.., D]` tensor and where each of its rows went.
#[derive(Debug, Clone)]
pub struct DistinctRows {
    rows: Tensor,
    index: Tensor,
    lead: Vec<usize>,
}

impl DistinctRows {
    /// Assemble from the distinct rows `[1, U, D]`, the index of every input row's distinct
    /// row (`I64 [n]`, on the rows' device) and the input's leading dimensions (product `n`).
    pub fn new(rows: Tensor, index: Tensor, lead: Vec<usize>) -> Result<DistinctRows> {
        let n: usize = lead.iter().product();
        let rs = rows.shape();
        if rs.len() != 3 || rs[0] != 1 || index.shape() != [n] || index.dtype() != DType::I64 {
            return Err(CoreError::shape(
                "distinct_rows",
                "need rows [1, U, D] and an i64 index [n] for the n input rows",
                &[rs, index.shape(), &lead],
            ));
        }
        Ok(DistinctRows { rows, index, lead })
    }

    /// The distinct rows, `[1, U, D]`.
    pub fn rows(&self) -> &Tensor {
        &self.rows
    }

    /// For every input row, the index of its distinct row (`I64 [n]`).
    pub fn index(&self) -> &Tensor {
        &self.index
    }

    /// `y [1, U, N]`, computed row-wise from [`DistinctRows::rows`], copied out to every row of
    /// the input: `[.., N]` with the input's leading dimensions (an exact gather, on `y`'s
    /// device).
    pub fn expand(&self, y: &Tensor) -> Result<Tensor> {
        let ys = y.shape();
        let u = self.rows.shape()[1];
        let Some(&n) = ys.last().filter(|_| ys.len() == 3 && ys[..2] == [1, u]) else {
            return Err(CoreError::shape(
                "DistinctRows::expand",
                "expected the rows' result [1, U, N]",
                &[ys, self.rows.shape()],
            ));
        };
        let out = crate::ops::embedding(&self.index, &y.reshape(&[u, n])?)?;
        let mut shape = self.lead.clone();
        shape.push(n);
        out.reshape(&shape)
    }
}

/// The distinct rows of `x [.., D]` (rows equal bit for bit share one), or `None` where there
/// is nothing to share: every row distinct, `x` not f32 or of rank < 2, or `x` on a backend
/// that does not look ([`Backend::distinct_rows`](crate::Backend::distinct_rows)).
pub fn distinct_rows(x: &Tensor) -> Result<Option<DistinctRows>> {
    let lead = x.shape()[..x.rank().saturating_sub(1)].to_vec();
    match crate::backend::of(&x.device()).distinct_rows(x)? {
        Some((rows, index)) => DistinctRows::new(rows, index, lead).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn distinct_rows_and_their_places() {
        let x = Tensor::from_vec(
            vec![1.0, 2.0, 0.0, 0.0, 1.0, 2.0, -0.0, 0.0, 0.0, 0.0],
            &[1, 5, 2],
        )
        .unwrap();
        let u = distinct_rows(&x).unwrap().expect("repeats");
        // -0.0 differs from 0.0 in its bits: a row of its own.
        assert_eq!(u.rows().shape(), [1, 3, 2]);
        assert_eq!(u.index().to_vec::<i64>().unwrap(), [0, 1, 0, 2, 1]);
        let y = Tensor::from_vec(vec![10.0, 20.0, 30.0], &[1, 3, 1]).unwrap();
        let e = u.expand(&y).unwrap();
        assert_eq!(e.shape(), [1, 5, 1]);
        assert_eq!(e.to_vec_f32().unwrap(), [10.0, 20.0, 10.0, 30.0, 20.0]);
        assert!(
            u.expand(&x).is_err(),
            "a result of the wrong rows is refused"
        );
        let distinct = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        assert!(distinct_rows(&distinct).unwrap().is_none());
    }
}
