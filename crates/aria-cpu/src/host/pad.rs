use super::f32_data;
use aria_tensor::{DType, Result, Tensor};

/// The CPU body of `aria_core::ops::pad`, on checked operands.
pub fn pad_host(x: &Tensor, dim: usize, before: usize, after: usize) -> Result<Tensor> {
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
