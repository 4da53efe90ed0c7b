use super::f32_data;
use crate::threads;
use aria_tensor::options::FourierLayout;
use aria_tensor::{Result, Tensor};

/// The CPU body of `aria_core::ops::fourier_features`, on checked operands.
pub fn fourier_features_host(
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

/// The CPU body of `aria_core::ops::fill_masked_rows`, on checked operands.
pub fn fill_masked_rows_host(x: &Tensor, mask: &Tensor, fill: Option<&Tensor>) -> Result<Tensor> {
    let s = x.shape();
    let d = s.last().copied().unwrap_or(0);
    let xc = x.contiguous()?;
    let mut out = f32_data(&xc)?.into_owned();
    let m = f32_data(mask)?;
    let fv = fill.map(f32_data).transpose()?;
    threads::install(|| crate::layout::fill_masked_rows(&mut out, d, &m, fv.as_deref()));
    Tensor::from_vec(out, s)
}
