use super::f32_data;
use aria_tensor::backend::check::linear_packed_shape;
use aria_tensor::format::WeightFormat;
use aria_tensor::{CoreError, DType, Result, Tensor};

/// The CPU body of `aria_core::ops::linear_packed`, on checked operands.
pub fn linear_packed_host(
    x: &Tensor,
    w: &Tensor,
    format: WeightFormat,
    w8a8: bool,
    shape: [usize; 2],
    b: Option<&Tensor>,
) -> Result<Tensor> {
    let out_shape = linear_packed_shape(x, format, w8a8, shape, b)?;
    let [rows, cols] = shape;
    match format {
        WeightFormat::Q8_0 => {}
        WeightFormat::Bf16Panels => return bf16_panels_reference(x, w, shape, b, &out_shape),
        _ => {
            return Err(CoreError::Unsupported {
                op: "linear_packed",
                backend: format!("cpu reference ({format}: run it through the format's kernels)"),
            })
        }
    }
    let row_bytes = format.row_bytes(cols);
    if w.dtype() != DType::U8 || w.shape() != [rows, row_bytes] {
        return Err(CoreError::shape(
            "linear_packed",
            "q8_0 blocks must be U8 [rows, ⌈cols / 32⌉ · 34]",
            &[w.shape(), &[rows, row_bytes]],
        ));
    }
    let wc = w.contiguous()?;
    let wb = wc.to_vec::<u8>()?;
    let xd = f32_data(x)?;
    let m = xd.len().checked_div(cols).unwrap_or(0);
    let bd = b.map(f32_data).transpose()?;
    let nb = cols.div_ceil(32);
    let mut out = vec![0f32; m * rows];
    let mut qx = vec![0i8; nb * 32];
    for r in 0..m {
        let xr = &xd[r * cols..(r + 1) * cols];
        let s = if w8a8 {
            quantize_row(xr, &mut qx[..cols])
        } else {
            1.0
        };
        for j in 0..rows {
            let wr = &wb[j * row_bytes..(j + 1) * row_bytes];
            let mut acc = 0f32;
            for bi in 0..nb {
                let blk = &wr[bi * 34..(bi + 1) * 34];
                let d = half::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                let q = &blk[2..34];
                if w8a8 {
                    let qa = &qx[bi * 32..(bi + 1) * 32];
                    let isum: i32 = qa
                        .iter()
                        .zip(q)
                        .map(|(a, w)| *a as i32 * (*w as i8) as i32)
                        .sum();
                    acc += d * isum as f32;
                } else {
                    // The padding of the last block is not read.
                    let xa = &xr[bi * 32..((bi + 1) * 32).min(cols)];
                    let dot: f32 = xa.iter().zip(q).map(|(a, w)| a * (*w as i8) as f32).sum();
                    acc += d * dot;
                }
            }
            let mut y = if w8a8 { acc * s } else { acc };
            if let Some(bd) = &bd {
                y += bd[j];
            }
            out[r * rows + j] = y;
        }
    }
    Tensor::from_vec(out, &out_shape)
}

/// Quantize one activation row per token (the W8A8 rule); returns the scale (NaN for a row
/// with a non-finite value, 0 for a zero row).
fn quantize_row(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    if !x.iter().all(|v| v.is_finite()) {
        q.fill(0);
        return f32::NAN;
    }
    if amax == 0.0 {
        q.fill(0);
        return 0.0;
    }
    let inv = 127.0 / amax;
    for (o, v) in q.iter_mut().zip(x) {
        *o = ((v * inv).round_ties_even() as i32).clamp(-127, 127) as i8;
    }
    amax / 127.0
}

/// The `bf16_panels` reference: the blocks (`U8 [rows, ⌈cols / 2⌉ · 4]`, bf16 pairs) packed into
/// panels and multiplied by the scalar emulation of `vdpbf16ps`, the arithmetic the format
/// documents (the CPU's `vdpbf16ps` kernel gives the same bits).
fn bf16_panels_reference(
    x: &Tensor,
    w: &Tensor,
    [rows, cols]: [usize; 2],
    b: Option<&Tensor>,
    out_shape: &[usize],
) -> Result<Tensor> {
    use crate::bf16dot::{matmul_vec, Bf16Panels, Kernel};
    let row_bytes = WeightFormat::Bf16Panels.row_bytes(cols);
    if w.dtype() != DType::U8 || w.shape() != [rows, row_bytes] {
        return Err(CoreError::shape(
            "linear_packed",
            "bf16_panels blocks must be U8 [rows, ⌈cols / 2⌉ · 4]",
            &[w.shape(), &[rows, row_bytes]],
        ));
    }
    let wb = w.contiguous()?.to_vec::<u8>()?;
    let panels = Bf16Panels::from_pairs(rows, cols, |row, out| {
        let r = &wb[row * row_bytes..(row + 1) * row_bytes];
        for (o, c) in out.iter_mut().zip(r.chunks_exact(4)) {
            *o = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
    });
    let xd = f32_data(x)?;
    let m = xd.len().checked_div(cols).unwrap_or(0);
    let bd = b.map(f32_data).transpose()?;
    let out = matmul_vec(Kernel::Emulated, m, &xd, cols, &panels, bd.as_deref());
    Tensor::from_vec(out, out_shape)
}
