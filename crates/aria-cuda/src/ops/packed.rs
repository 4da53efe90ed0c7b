//! Products with packed weights (`linear_packed`) and CFG rescale on the device
//! (`kernels/packed.cu`, `kernels/guidance.cu`). The blocks are uploaded in the op set's layout
//! unchanged (`U8 [rows, row_bytes]`), so the kernels read what the CPU reference reads.

use aria_tensor::format::{PackedBlocks, WeightFormat};
use aria_tensor::{CoreError, DType, Result, Tensor};

use crate::backend::{be_err, CudaBackend, KArg};
use crate::launch;

/// The packed formats the kernels run, each with whether W8A8 runs on it.
pub(crate) const PACKED_FORMATS: [(WeightFormat, bool); 4] = [
    (WeightFormat::Q8_0, true),
    (WeightFormat::Bf16Panels, false),
    (WeightFormat::Q4K, false),
    (WeightFormat::Q6K, false),
];

/// The blocks of a weight to upload: a format the kernels run, `U8 [rows, row_bytes]`.
pub(crate) fn check_blocks(w: &PackedBlocks) -> Result<()> {
    if !PACKED_FORMATS
        .iter()
        .any(|&(f, w8a8)| f == w.format && (w8a8 || !w.w8a8))
    {
        return Err(be_err(format!(
            "no kernel for packed {}{} weights (formats here: {})",
            w.format,
            if w.w8a8 { " (W8A8)" } else { "" },
            aria_tensor::backend::format_list(&PACKED_FORMATS)
        )));
    }
    let want = [w.rows, w.format.row_bytes(w.cols)];
    if w.data.dtype() != DType::U8 || w.data.shape() != want {
        return Err(CoreError::shape(
            "upload_packed",
            format!("{} blocks must be U8 [rows, row_bytes]", w.format),
            &[w.data.shape(), &want],
        ));
    }
    Ok(())
}

impl CudaBackend {
    /// `y = x·Wᵀ + b` for blocks uploaded by `upload_packed`: one warp per output.
    pub(crate) fn linear_packed(
        &self,
        x: &Tensor,
        w: &Tensor,
        format: WeightFormat,
        w8a8: bool,
        shape: [usize; 2],
        b: Option<&Tensor>,
    ) -> Result<Tensor> {
        const OP: &str = "linear_packed";
        let out_shape =
            aria_tensor::backend::check::linear_packed_shape(x, format, w8a8, shape, b)?;
        let [rows, cols] = shape;
        let want = [rows, format.row_bytes(cols)];
        if w.dtype() != DType::U8 || w.shape() != want {
            return Err(CoreError::shape(
                OP,
                format!("{format} blocks must be U8 [rows, row_bytes]"),
                &[w.shape(), &want],
            ));
        }
        let m = x.elem_count().checked_div(cols).unwrap_or(0);
        let out = self.alloc(&out_shape, DType::F32, false)?;
        let outputs = m * rows;
        if outputs == 0 {
            return Ok(out);
        }
        let xc = self.f32c(x)?;
        let wc = self.on_device(w)?;
        let (_b, pb) = self.opt(b)?;
        let (px, pw, po) = (self.ptr(&xc)?, self.ptr(&wc)?, self.ptr(&out)?);
        // A warp per output: 32 threads of the grid-stride launch each.
        let cfg = launch::elementwise(outputs.saturating_mul(32));
        let (m64, n64, k64) = (m as u64, rows as u64, cols as u64);
        // The weight-only kernels take the same arguments.
        let weight_only = |entry: &'static str| {
            self.launch(
                entry,
                cfg,
                &[
                    KArg::P(px),
                    KArg::P(pw),
                    KArg::P(pb),
                    KArg::P(po),
                    KArg::U(m64),
                    KArg::U(n64),
                    KArg::U(k64),
                ],
            )
        };
        match (format, w8a8) {
            (WeightFormat::Q8_0, false) => weight_only("linear_q8_0_f32")?,
            (WeightFormat::Q8_0, true) => {
                let nb = cols.div_ceil(32);
                let q = self.alloc(&[m, nb * 32], DType::I8, false)?;
                let s = self.alloc(&[m], DType::F32, false)?;
                let (pq, ps) = (self.ptr(&q)?, self.ptr(&s)?);
                self.launch(
                    "quantize_rows_i8",
                    launch::rows(OP, m, cols)?,
                    &[
                        KArg::P(px),
                        KArg::P(pq),
                        KArg::P(ps),
                        KArg::U(k64),
                        KArg::U((nb * 32) as u64),
                    ],
                )?;
                self.launch(
                    "linear_q8_0_w8a8_f32",
                    cfg,
                    &[
                        KArg::P(pq),
                        KArg::P(ps),
                        KArg::P(pw),
                        KArg::P(pb),
                        KArg::P(po),
                        KArg::U(m64),
                        KArg::U(n64),
                        KArg::U(nb as u64),
                    ],
                )?
            }
            (WeightFormat::Bf16Panels, false) => weight_only("linear_bf16_pairs_f32")?,
            (WeightFormat::Q4K, false) => weight_only("linear_q4_k_f32")?,
            (WeightFormat::Q6K, false) => weight_only("linear_q6_k_f32")?,
            _ => {
                return Err(CoreError::Unsupported {
                    op: OP,
                    backend: format!("{} ({format} weights)", crate::NAME),
                })
            }
        }
        Ok(out)
    }

    /// `cfg_rescale`: one thread per (item, position) of `v [B, C, T]`.
    pub(crate) fn cfg_rescale(&self, v: &Tensor, v_cond: &Tensor, phi: f32) -> Result<Tensor> {
        let [nb, c, t] = super::dims3("cfg_rescale", v)?;
        let out = self.alloc(v.shape(), DType::F32, false)?;
        if nb * c * t == 0 {
            return Ok(out);
        }
        let (vc, cc) = (self.f32c(v)?, self.f32c(v_cond)?);
        self.launch(
            "cfg_rescale_f32",
            launch::elementwise(nb * t),
            &[
                KArg::P(self.ptr(&vc)?),
                KArg::P(self.ptr(&cc)?),
                KArg::P(self.ptr(&out)?),
                KArg::U(nb as u64),
                KArg::U(c as u64),
                KArg::U(t as u64),
                KArg::F(phi),
            ],
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(
        format: WeightFormat,
        w8a8: bool,
        rows: usize,
        cols: usize,
        bytes: usize,
    ) -> PackedBlocks {
        PackedBlocks {
            format,
            w8a8,
            rows,
            cols,
            data: Tensor::zeros(&[rows, bytes], DType::U8),
        }
    }

    /// Uploads are held to the op set's block layout; formats without a kernel are refused by
    /// name before anything reaches the device.
    #[test]
    fn blocks_are_checked_before_upload() {
        assert!(check_blocks(&blocks(WeightFormat::Q8_0, false, 3, 40, 68)).is_ok());
        assert!(check_blocks(&blocks(WeightFormat::Q8_0, true, 3, 40, 68)).is_ok());
        assert!(check_blocks(&blocks(WeightFormat::Bf16Panels, false, 2, 7, 16)).is_ok());
        let e = check_blocks(&blocks(WeightFormat::Q8_0, false, 3, 40, 34)).unwrap_err();
        assert!(e.to_string().contains("row_bytes"), "{e}");
        assert!(check_blocks(&blocks(WeightFormat::Q4K, false, 3, 256, 144)).is_ok());
        assert!(check_blocks(&blocks(WeightFormat::Q6K, false, 3, 512, 420)).is_ok());
        let e = check_blocks(&blocks(WeightFormat::Q4K, true, 3, 256, 144)).unwrap_err();
        assert!(
            e.to_string().contains("q4_k") && e.to_string().contains("W8A8"),
            "{e}"
        );
        let e = check_blocks(&blocks(WeightFormat::Bf16Panels, true, 2, 7, 16)).unwrap_err();
        assert!(e.to_string().contains("W8A8"), "{e}");
    }
}
