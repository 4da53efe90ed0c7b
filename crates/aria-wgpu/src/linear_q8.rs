//! Packed weights: `q8_0` packed into this backend's layout at upload, and its products
//! (weight-only and W8A8) in `linear_q8.wgsl` / `quantize_rows.wgsl`; `q4_k` and `q6_k`
//! (weight-only) in their own block layout (a `q6_k` block padded to a whole number of words),
//! their products in `linear_kq.wgsl`.

use super::launch::{Bind, Shader, Uniforms};
use super::linear::u32_of;
use super::{be_err, WgpuBackend};
use aria_tensor::format::{PackedBlocks, WeightFormat};
use aria_tensor::{CoreError, DType, Result, Tensor};

const LINEAR_Q8: Shader = Shader::new("linear_q8.wgsl", include_str!("linear_q8.wgsl"));
const QUANTIZE: Shader = Shader::new("quantize_rows.wgsl", include_str!("quantize_rows.wgsl"));
const LINEAR_KQ: Shader = Shader::new("linear_kq.wgsl", include_str!("linear_kq.wgsl"));

/// Words per `q8_0` block in this backend's layout (the f32 scale, 8 words of int8).
const BLOCK_WORDS: usize = 9;

/// Bytes of one block in this backend's layout: `q8_0` with an f32 scale, `q4_k` as it is,
/// `q6_k` padded from 210 bytes to a whole number of words.
fn device_block_bytes(f: WeightFormat) -> Option<usize> {
    match f {
        WeightFormat::Q8_0 => Some(BLOCK_WORDS * 4),
        WeightFormat::Q4K => Some(144),
        WeightFormat::Q6K => Some(212),
        _ => None,
    }
}

impl WgpuBackend {
    /// The formats [`WgpuBackend::upload_packed_impl`] packs, with W8A8.
    pub(crate) fn packed_formats_impl(&self) -> Vec<(WeightFormat, bool)> {
        vec![
            (WeightFormat::Q8_0, true),
            (WeightFormat::Q4K, false),
            (WeightFormat::Q6K, false),
        ]
    }

    /// Repack `q8_0` blocks (34 bytes: f16 scale, 32 int8) into 36-byte blocks with an f32
    /// scale (the f16 value converted exactly), so the kernel reads whole aligned words; rows
    /// stay whole (a weight past one binding is split between rows).
    pub(crate) fn upload_packed_impl(&self, w: &PackedBlocks) -> Result<Tensor> {
        let Some(dbb) =
            device_block_bytes(w.format).filter(|_| !w.w8a8 || w.format == WeightFormat::Q8_0)
        else {
            return Err(be_err(format!(
                "no kernel for packed {}{} weights (formats here: {})",
                w.format,
                if w.w8a8 { " (W8A8)" } else { "" },
                aria_tensor::backend::format_list(&self.packed_formats_impl())
            )));
        };
        let (bb, be) = (w.format.block_bytes(), w.format.block_elems());
        let nb = w.cols.div_ceil(be);
        let (rb, nrb) = (w.format.row_bytes(w.cols), nb * dbb);
        if w.data.dtype() != DType::U8 || w.data.shape() != [w.rows, rb] {
            return Err(CoreError::shape(
                "upload_packed",
                format!(
                    "{} blocks must be U8 [rows, ⌈cols / {be}⌉ · {bb}]",
                    w.format
                ),
                &[w.data.shape(), &[w.rows, rb]],
            ));
        }
        let src = w.data.contiguous()?.to_vec::<u8>()?;
        if w.format == WeightFormat::Q4K {
            return self.upload_impl(&Tensor::from_vec(src, &[w.rows, nrb])?);
        }
        let mut out = vec![0u8; w.rows * nrb];
        for (blk, o) in src.chunks_exact(bb).zip(out.chunks_exact_mut(dbb)) {
            if w.format == WeightFormat::Q8_0 {
                let d = aria_tensor::f16::from_le_bytes([blk[0], blk[1]]).to_f32();
                o[..4].copy_from_slice(&d.to_le_bytes());
                o[4..].copy_from_slice(&blk[2..]);
            } else {
                o[..bb].copy_from_slice(blk);
            }
        }
        let t = Tensor::from_vec(out, &[w.rows, nrb])?;
        self.upload_impl(&t)
    }

    /// `y = x·Wᵀ + b` for a `q8_0` weight uploaded by [`WgpuBackend::upload_packed_impl`]
    /// (the call was checked by `ops::linear_packed_shape`).
    pub(crate) fn linear_packed(
        &self,
        x: &Tensor,
        w: &Tensor,
        format: WeightFormat,
        w8a8: bool,
        [n, k]: [usize; 2],
        b: Option<&Tensor>,
    ) -> Result<Tensor> {
        const OP: &str = "linear_packed";
        let out_shape =
            aria_tensor::backend::check::linear_packed_shape(x, format, w8a8, [n, k], b)?;
        let dbb = device_block_bytes(format).filter(|_| !w8a8 || format == WeightFormat::Q8_0);
        let row_bytes = k.div_ceil(format.block_elems()) * dbb.unwrap_or(0);
        if dbb.is_none() || w.shape() != [n, row_bytes] || w.dtype() != DType::U8 {
            return Err(be_err(format!(
                "{OP}: the weight is not a {format} weight uploaded here (shape {:?})",
                w.shape()
            )));
        }
        let m = x.elem_count() / k.max(1);
        let xt = self.operand_f32(OP, x)?;
        let wt = self.operand(w)?;
        let bt = b.map(|b| self.operand_as_f32(b)).transpose()?;
        let out = self.alloc(&out_shape, DType::F32)?;
        if m == 0 || n == 0 {
            return Ok(out);
        }
        u32_of(OP, m * k)?;
        u32_of(OP, m * n)?;
        let (_, x_off) = self.binding_of(&xt)?;
        // W8A8: the activations quantized per row first.
        let (xin, x_off) = if w8a8 {
            let q = self.alloc(&[m, 1 + k.div_ceil(32) * 8], DType::F32)?;
            let u = Uniforms::new().size("M", m)?.size("K", k)?.u32(x_off);
            self.launch(
                &QUANTIZE,
                "quantize_rows",
                &[],
                &[Bind::T(&xt), Bind::T(&q)],
                u,
                [u32_of(OP, m)?, 1, 1],
            )?;
            (q, 0)
        } else {
            (xt, x_off)
        };
        let b_off = bt.as_ref().map(|t| self.binding_of(t)).transpose()?;
        let ws = self.storage_of(&wt)?;
        let words = row_bytes / 4;
        // (first row, rows, buffer, word offset) of each part; chunks hold whole rows.
        let parts = if ws.chunks.len() > 1 && wt.offset() == 0 {
            let per = (ws.chunk_bytes / row_bytes.max(1)).max(1);
            ws.chunks
                .iter()
                .enumerate()
                .map(|(c, buf)| (c * per, per.min(n.saturating_sub(c * per)), buf, 0u32))
                .filter(|p| p.1 > 0)
                .collect::<Vec<_>>()
        } else {
            let (buf, off) = self.binding_of(&wt)?;
            vec![(0, n, buf, off / 4)]
        };
        for (r0, rows, wbuf, w_off) in parts {
            u32_of(OP, rows * words)?;
            let u = Uniforms::new()
                .size("M", m)?
                .size("N", rows)?
                .size("K", k)?
                .u32(u32::from(bt.is_some()))
                .u32(x_off)
                .u32(w_off)
                .u32(b_off.map_or(0, |(_, o)| o) + r0 as u32)
                .size("N", n)?
                .size("column", r0)?;
            let (shader, entry, constant) = match format {
                WeightFormat::Q8_0 => (&LINEAR_Q8, "linear_q8", ("W8A8", u32::from(w8a8))),
                WeightFormat::Q4K => (&LINEAR_KQ, "linear_kq", ("FORMAT", 0)),
                _ => (&LINEAR_KQ, "linear_kq", ("FORMAT", 1)),
            };
            self.launch(
                shader,
                entry,
                &[constant],
                &[
                    Bind::T(&xin),
                    Bind::Buf(wbuf),
                    Bind::Opt(bt.as_ref()),
                    Bind::T(&out),
                ],
                u,
                [u32_of(OP, rows.div_ceil(64))?, u32_of(OP, m)?, 1],
            )?;
        }
        Ok(out)
    }
}
