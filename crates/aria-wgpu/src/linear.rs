//! `linear` and `matmul`: tiled products (`linear.wgsl`, `matmul.wgsl`).

use super::launch::{shader, Bind, Shader, Uniforms};
use super::{be_err, WgpuBackend};
use aria_tensor::{CoreError, DType, Result, Tensor};

const LINEAR: Shader = shader!("linear.wgsl", "weights.wgsl");
const MATMUL: Shader = Shader::new("matmul.wgsl", include_str!("matmul.wgsl"));

/// The `WDT` constant of a weight dtype (f32 0, f16 1, bf16 2).
pub(crate) fn weight_code(op: &'static str, w: &Tensor) -> Result<u32> {
    match w.dtype() {
        DType::F32 => Ok(0),
        DType::F16 => Ok(1),
        DType::BF16 => Ok(2),
        d => Err(CoreError::DType {
            op,
            dtype: d,
            reason: "weights must be f32, f16 or bf16".into(),
        }),
    }
}

/// A size as a `u32`, or an error naming the op.
pub(crate) fn u32_of(op: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| be_err(format!("{op}: size {v} exceeds 32-bit indexing")))
}

impl WgpuBackend {
    /// The square tile of the products, clamped to the device's workgroup limits.
    pub(crate) fn gemm_tile(&self) -> u32 {
        let l = &self.ctx.limits;
        let mut t = self.ctx.knobs.gemm_tile.clamp(4, 32);
        while t > 4
            && (t * t > l.max_compute_invocations_per_workgroup
                || t > l.max_compute_workgroup_size_x
                || t > l.max_compute_workgroup_size_y
                || 2 * t * t * 4 > l.max_compute_workgroup_storage_size)
        {
            t /= 2;
        }
        t
    }

    pub(crate) fn linear(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        const OP: &str = "linear";
        let (m, k, n) = aria_tensor::backend::check::linear_dims(x, w, b)?;
        let wdt = weight_code(OP, w)?;
        let mut shape = x.shape().to_vec();
        if let Some(last) = shape.last_mut() {
            *last = n;
        }
        let xt = self.operand_as_f32(x)?;
        let wt = self.operand(w)?;
        let bt = b.map(|b| self.operand_as_f32(b)).transpose()?;
        let out = self.alloc(&shape, DType::F32)?;
        if m == 0 || n == 0 {
            return Ok(out);
        }
        u32_of(OP, m * k)?;
        u32_of(OP, m * n)?;
        let tile = self.gemm_tile();
        let (_, x_off) = self.binding_of(&xt)?;
        let b_off = bt.as_ref().map(|t| self.binding_of(t)).transpose()?;
        let ws = self.storage_of(&wt)?;
        // Row ranges of w, one per buffer: a weight past one binding runs chunk by chunk.
        // (first row, rows, buffer, element offset) of each part.
        let parts = if ws.chunks.len() > 1 && wt.offset() == 0 {
            // Chunks hold whole rows of [N, K].
            let per = (ws.chunk_elems() / k.max(1)).max(1);
            ws.chunks
                .iter()
                .enumerate()
                .map(|(c, buf)| (c * per, per.min(n.saturating_sub(c * per)), buf, 0u32))
                .filter(|p| p.1 > 0)
                .collect::<Vec<_>>()
        } else {
            let (buf, off) = self.binding_of(&wt)?;
            vec![(0, n, buf, off)]
        };
        for (r0, rows, wbuf, w_off) in parts {
            u32_of(OP, rows * k)?;
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
            self.launch(
                &LINEAR,
                "linear",
                &[("TILE", tile), ("WDT", wdt)],
                &[
                    Bind::T(&xt),
                    Bind::Buf(wbuf),
                    Bind::Opt(bt.as_ref()),
                    Bind::T(&out),
                ],
                u,
                [
                    u32_of(OP, rows.div_ceil(tile as usize))?,
                    u32_of(OP, m.div_ceil(tile as usize))?,
                    1,
                ],
            )?;
        }
        Ok(out)
    }

    pub(crate) fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        const OP: &str = "matmul";
        let (batch, m, k, n) = aria_tensor::backend::check::matmul_dims(a, b)?;
        let mut shape = a.shape().to_vec();
        if let Some(l) = shape.last_mut() {
            *l = n;
        }
        let at = self.operand_as_f32(a)?;
        let bt = self.operand_as_f32(b)?;
        let out = self.alloc(&shape, DType::F32)?;
        if batch * m * n == 0 {
            return Ok(out);
        }
        u32_of(OP, batch * m * k)?;
        u32_of(OP, batch * k * n)?;
        u32_of(OP, batch * m * n)?;
        let tile = self.gemm_tile();
        let (_, a_off) = self.binding_of(&at)?;
        let (_, b_off) = self.binding_of(&bt)?;
        let zmax = self.ctx.limits.max_compute_workgroups_per_dimension.max(1) as usize;
        let mut z0 = 0;
        while z0 < batch {
            let zn = zmax.min(batch - z0);
            let u = Uniforms::new()
                .size("M", m)?
                .size("N", n)?
                .size("K", k)?
                .u32(a_off)
                .u32(b_off)
                .size("batch", z0)?;
            self.launch(
                &MATMUL,
                "matmul",
                &[("TILE", tile)],
                &[Bind::T(&at), Bind::T(&bt), Bind::T(&out)],
                u,
                [
                    u32_of(OP, n.div_ceil(tile as usize))?,
                    u32_of(OP, m.div_ceil(tile as usize))?,
                    zn as u32,
                ],
            )?;
            z0 += zn;
        }
        Ok(out)
    }

    /// Compile the product kernel (called when the backend opens).
    pub(crate) fn warm_up(&self) -> Result<()> {
        let x = self.upload_impl(&Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?)?;
        let w = self.upload_impl(&Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2])?)?;
        self.linear(&x, &w, None).map(|_| ())
    }
}
