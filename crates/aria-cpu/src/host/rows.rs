use aria_tensor::{DType, Result, Tensor};

/// The distinct rows of `x [.., D]` (rows equal bit for bit share one) as `[1, U, D]`, and for
/// every row the index of its distinct row (`I64 [n]`); `None` where there is nothing to share
/// (every row distinct, `x` not f32 or of rank < 2). The CPU backend's `distinct_rows`: the
/// rows are read and hashed bit for bit.
pub fn distinct_rows(x: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
    let s = x.shape();
    if s.len() < 2 || x.dtype() != DType::F32 {
        return Ok(None);
    }
    let d = s[s.len() - 1];
    let n: usize = s[..s.len() - 1].iter().product();
    if d == 0 || n < 2 {
        return Ok(None);
    }
    let data = x.to_vec_f32()?;
    let bits: Vec<u32> = data.iter().map(|v| v.to_bits()).collect();
    let mut first: std::collections::HashMap<&[u32], i64> =
        std::collections::HashMap::with_capacity(n);
    let mut order: Vec<usize> = Vec::new();
    let mut index = Vec::with_capacity(n);
    for (r, row) in bits.chunks_exact(d).enumerate() {
        let u = *first.entry(row).or_insert_with(|| {
            order.push(r);
            order.len() as i64 - 1
        });
        index.push(u);
    }
    if order.len() == n {
        return Ok(None);
    }
    let mut rows = Vec::with_capacity(order.len() * d);
    for &r in &order {
        rows.extend_from_slice(&data[r * d..(r + 1) * d]);
    }
    Ok(Some((
        Tensor::from_vec(rows, &[1, order.len(), d])?,
        Tensor::from_vec(index, &[n])?,
    )))
}
