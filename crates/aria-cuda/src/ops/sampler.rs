//! Sampler ops whose scalars live in device memory (the forms a captured step uses).

use aria_tensor::{CoreError, DType, Result, Tensor};

use super::dims3;
use crate::backend::{CudaBackend, KArg};
use crate::launch;

// These device forms take their per-step scalars as tensors, so they are not ops of the set and
// check their own operands.

fn expect(op: &'static str, what: &str, t: &Tensor, shape: &[usize]) -> Result<()> {
    if t.shape() != shape {
        return Err(CoreError::shape(
            op,
            format!("{what} must be {shape:?}"),
            &[t.shape()],
        ));
    }
    Ok(())
}

fn count(op: &'static str, what: &str, t: &Tensor, n: usize) -> Result<()> {
    if t.elem_count() != n {
        return Err(CoreError::shape(
            op,
            format!("{what} must have {n} elements"),
            &[t.shape()],
        ));
    }
    Ok(())
}

impl CudaBackend {
    /// `aria_core::ops::apg_guidance` with `sigma [B]` read from device memory (the form a
    /// captured sampler step uses). `scales` is `[cfg_scale, apg_scale, norm_threshold]`.
    pub fn apg_guidance_device(
        &self,
        x: &Tensor,
        v_cond: &Tensor,
        v_uncond: &Tensor,
        sigma: &Tensor,
        mask: Option<&Tensor>,
        scales: [f32; 3],
    ) -> Result<Tensor> {
        const OP: &str = "apg_guidance";
        let [b, c, t] = dims3(OP, x)?;
        if v_cond.shape() != x.shape() || v_uncond.shape() != x.shape() {
            return Err(CoreError::shape(
                OP,
                "x, v_cond, v_uncond must match",
                &[x.shape(), v_cond.shape(), v_uncond.shape()],
            ));
        }
        count(OP, "sigma", sigma, b)?;
        if let Some(m) = mask {
            expect(OP, "mask", m, &[b, t])?;
        }
        let (xc, vc, vu, sc) = (
            self.f32c(x)?,
            self.f32c(v_cond)?,
            self.f32c(v_uncond)?,
            self.f32c(sigma)?,
        );
        let (_m, pm) = self.opt(mask)?;
        let out = self.alloc(x.shape(), DType::F32, false)?;
        if b * c * t > 0 {
            self.launch(
                "apg_guidance_f32",
                launch::rows(OP, b, c * t)?,
                &[
                    KArg::P(self.ptr(&xc)?),
                    KArg::P(self.ptr(&vc)?),
                    KArg::P(self.ptr(&vu)?),
                    KArg::P(self.ptr(&sc)?),
                    KArg::P(pm),
                    KArg::P(self.ptr(&out)?),
                    KArg::U(c as u64),
                    KArg::U(t as u64),
                    KArg::F(scales[0]),
                    KArg::F(scales[1]),
                    KArg::F(scales[2]),
                ],
            )?;
        }
        Ok(out)
    }
}

impl CudaBackend {
    /// An elementwise kernel over rows of `d`: `entry(x, before..., y, n, d, extra...)`.
    pub(crate) fn map1_rows(
        &self,
        x: &Tensor,
        entry: &'static str,
        before: &[KArg],
        d: usize,
        extra: &[KArg],
    ) -> Result<Tensor> {
        let xc = self.f32c(x)?;
        let out = self.alloc(x.shape(), DType::F32, false)?;
        let n = x.elem_count();
        if n > 0 {
            let mut args = vec![KArg::P(self.ptr(&xc)?)];
            args.extend_from_slice(before);
            args.extend([
                KArg::P(self.ptr(&out)?),
                KArg::U(n as u64),
                KArg::U(d as u64),
            ]);
            args.extend_from_slice(extra);
            self.launch(entry, launch::elementwise(n), &args)?;
        }
        Ok(out)
    }

    /// `a_i·x + b_i·y` per batch item with the scalars `a`, `b` (`[B]` f32) read from device
    /// memory: the form a captured sampler step uses (its coefficients change per step without
    /// re-capturing).
    pub fn axpby_device(&self, a: &Tensor, x: &Tensor, b: &Tensor, y: &Tensor) -> Result<Tensor> {
        let items = x.shape().first().copied().unwrap_or(1);
        if x.shape() != y.shape() || a.elem_count() != items || b.elem_count() != items {
            return Err(CoreError::shape(
                "axpby",
                format!("x, y must match and a, b have {items} scalars"),
                &[x.shape(), y.shape(), a.shape(), b.shape()],
            ));
        }
        let (ac, bc, xc, yc) = (self.f32c(a)?, self.f32c(b)?, self.f32c(x)?, self.f32c(y)?);
        let out = self.alloc(x.shape(), DType::F32, false)?;
        let n = x.elem_count();
        if n > 0 {
            self.launch(
                "axpby_f32",
                launch::elementwise(n),
                &[
                    KArg::P(self.ptr(&ac)?),
                    KArg::P(self.ptr(&xc)?),
                    KArg::P(self.ptr(&bc)?),
                    KArg::P(self.ptr(&yc)?),
                    KArg::P(self.ptr(&out)?),
                    KArg::U(n as u64),
                    KArg::U((n / items.max(1)) as u64),
                ],
            )?;
        }
        Ok(out)
    }
}
