use std::borrow::Cow;

use super::f32_data;
use crate::bf16dot::{matmul_vec, Bf16Panels, Kernel};
use crate::quant::{blocks, Compute, WView};
use crate::threads;
use aria_tensor::backend::check::linear_packed_shape;
use aria_tensor::format::WeightFormat;
use aria_tensor::{CoreError, DType, Device, Result, Tensor};

/// The CPU body of `aria_core::ops::linear_packed`, on checked operands: the format's fast
/// kernels on the CPU's layout of the weight (what [`Cpu::upload_packed`](crate::Cpu) gives).
///
/// - `q8_0`, `q4_k`, `q6_k`: `w` is the blocks, `U8 [rows, row_bytes]`, read in place by the
///   kernels of [`crate::quant`] (weight-only: the bits of the CPU's f32 product on the
///   dequantized weight; W8A8: exact int32 block sums, the same bits on every int8 path).
/// - `bf16_panels`: `w` is the CPU's panels (`U8` of
///   [`Bf16Panels::layout_shape`](crate::bf16dot::Bf16Panels::layout_shape), rank 3), run on
///   the AMX tile unit where it is granted, else `vdpbf16ps` or its scalar emulation (the same
///   bits); the format's blocks (rank 2) are packed on the fly and run on the emulation, the
///   format's reference.
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
        WeightFormat::Q8_0 | WeightFormat::Q4K | WeightFormat::Q6K => {}
        WeightFormat::Bf16Panels if w.rank() == 3 => {
            let panels = Bf16Panels::from_tensor(rows, cols, w)?;
            let kernel = match crate::current() {
                crate::Isa::Avx512 if crate::bf16dot::use_tiles() => Kernel::Amx,
                crate::Isa::Avx512 => Kernel::Native,
                _ => Kernel::Emulated,
            };
            return bf16_product(kernel, x, &panels, cols, b, &out_shape);
        }
        WeightFormat::Bf16Panels => return bf16_panels_reference(x, w, shape, b, &out_shape),
        _ => {
            return Err(CoreError::Unsupported {
                op: "linear_packed",
                backend: format!("cpu ({format})"),
            })
        }
    }
    let wb = block_bytes(format, w, shape)?;
    let view = WView::new(format, rows, cols, &wb)?;
    let xd = f32_data(x)?;
    let m = xd.len().checked_div(cols).unwrap_or(0);
    let bd = b.map(f32_data).transpose()?;
    let kernel = view.kernel(Compute::from_w8a8(w8a8), m);
    let out = view.matmul_bias(kernel, &xd, m, bd.as_deref())?;
    Tensor::from_vec(out, &out_shape)
}

/// The blocks of a block-format weight, checked to be `U8 [rows, row_bytes]` on the host
/// (borrowed when contiguous).
fn block_bytes(
    format: WeightFormat,
    w: &Tensor,
    [rows, cols]: [usize; 2],
) -> Result<Cow<'_, [u8]>> {
    let row_bytes = format.row_bytes(cols);
    if w.dtype() != DType::U8 || w.shape() != [rows, row_bytes] {
        return Err(CoreError::shape(
            "linear_packed",
            format!(
                "{format} blocks must be U8 [rows, ⌈cols / {}⌉ · {}] (got {})",
                format.block_elems(),
                format.block_bytes(),
                w.dtype()
            ),
            &[w.shape(), &[rows, row_bytes]],
        ));
    }
    if let Device::Backend(be) = w.device() {
        return Err(CoreError::Unsupported {
            op: "linear_packed",
            backend: format!("cpu (the weight lives on {})", be.name()),
        });
    }
    Ok(if w.is_contiguous() {
        Cow::Borrowed(w.as_bytes()?)
    } else {
        Cow::Owned(w.contiguous()?.to_vec::<u8>()?)
    })
}

fn bf16_product(
    kernel: Kernel,
    x: &Tensor,
    panels: &Bf16Panels,
    cols: usize,
    b: Option<&Tensor>,
    out_shape: &[usize],
) -> Result<Tensor> {
    let xd = f32_data(x)?;
    let m = xd.len().checked_div(cols).unwrap_or(0);
    let bd = b.map(f32_data).transpose()?;
    let out = threads::install(|| matmul_vec(kernel, m, &xd, cols, panels, bd.as_deref()));
    Tensor::from_vec(out, out_shape)
}

/// The scalar reference of `linear_packed` on the blocks (`U8 [rows, row_bytes]`) of every
/// format, what the fast kernels are tested against: a `q8_0` output is `Σ_blocks d·(Σ x·q)`
/// (W8A8: `s·Σ_blocks d·Σ q_x·q`, activations quantized per token: `s = max|x|/127`, ties to
/// even, ±127) in block order; a `q4_k`/`q6_k` output the sum of `x·w` over the dequantized
/// row, in order; a `bf16_panels` output the bf16 pair products of the rounded activations
/// summed in f32 pair by pair (the scalar statement of `vdpbf16ps`); each plus the bias.
pub fn linear_packed_reference(
    x: &Tensor,
    w: &Tensor,
    format: WeightFormat,
    w8a8: bool,
    shape: [usize; 2],
    b: Option<&Tensor>,
) -> Result<Tensor> {
    let out_shape = linear_packed_shape(x, format, w8a8, shape, b)?;
    let [rows, cols] = shape;
    if format == WeightFormat::Bf16Panels {
        return bf16_panels_reference(x, w, shape, b, &out_shape);
    }
    let wb = block_bytes(format, w, shape)?;
    let row_bytes = format.row_bytes(cols);
    let xd = f32_data(x)?;
    let m = xd.len().checked_div(cols).unwrap_or(0);
    let bd = b.map(f32_data).transpose()?;
    let nb = cols.div_ceil(32);
    let mut out = vec![0f32; m * rows];
    let mut qx = vec![0i8; nb * 32];
    let mut wrow = vec![0f32; cols];
    for j in 0..rows {
        let wr = &wb[j * row_bytes..(j + 1) * row_bytes];
        if format != WeightFormat::Q8_0 {
            blocks::dequantize_row(format, wr, &mut wrow);
        }
        for r in 0..m {
            let xr = &xd[r * cols..(r + 1) * cols];
            let mut y = if format != WeightFormat::Q8_0 {
                xr.iter().zip(&wrow).map(|(a, w)| a * w).sum()
            } else {
                let s = if w8a8 {
                    quantize_row(xr, &mut qx[..cols])
                } else {
                    1.0
                };
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
                if w8a8 {
                    acc * s
                } else {
                    acc
                }
            };
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
    let row_bytes = WeightFormat::Bf16Panels.row_bytes(cols);
    if w.dtype() != DType::U8 || w.shape() != [rows, row_bytes] {
        return Err(CoreError::shape(
            "linear_packed",
            "bf16_panels blocks must be U8 [rows, ⌈cols / 2⌉ · 4]",
            &[w.shape(), &[rows, row_bytes]],
        ));
    }
    let wb = w.contiguous()?;
    let panels = Bf16Panels::from_pair_bytes(rows, cols, wb.as_bytes()?);
    let xd = f32_data(x)?;
    let m = xd.len().checked_div(cols).unwrap_or(0);
    let bd = b.map(f32_data).transpose()?;
    let out = matmul_vec(Kernel::Emulated, m, &xd, cols, &panels, bd.as_deref());
    Tensor::from_vec(out, out_shape)
}
