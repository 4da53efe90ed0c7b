//! The layers' ops: products, attention, elementwise and row kernels, layout copies.

use aria_tensor::backend::{BinaryOp, Op};
use aria_tensor::options::{AttnOpts, GluAct, KeyMaskMode};
use aria_tensor::{contiguous_strides, CoreError, DType, Result, Tensor};

use super::last_dim;
use super::shapes::{attention_args, broadcast_strides, table_width};
use crate::backend::{CudaBackend, KArg};
use crate::gemm::{Gemm, GemmType};
use crate::launch::{self, AttnArgs, Strides6};
use crate::plan;
use aria_tensor::backend::check;

impl CudaBackend {
    pub(crate) fn opt(&self, t: Option<&Tensor>) -> Result<(Option<Tensor>, u64)> {
        match t {
            Some(t) => {
                let c = self.f32c(t)?;
                let p = self.ptr(&c)?;
                Ok((Some(c), p))
            }
            None => Ok((None, 0)),
        }
    }

    /// `y = f(x)` elementwise over a contiguous f32 copy of `x`.
    pub(crate) fn map1(&self, x: &Tensor, entry: &'static str, extra: &[KArg]) -> Result<Tensor> {
        let xc = self.f32c(x)?;
        let out = self.alloc(x.shape(), DType::F32, false)?;
        let n = x.elem_count();
        if n > 0 {
            let mut args = vec![
                KArg::P(self.ptr(&xc)?),
                KArg::P(self.ptr(&out)?),
                KArg::U(n as u64),
            ];
            args.extend_from_slice(extra);
            self.launch(entry, launch::elementwise(n), &args)?;
        }
        Ok(out)
    }

    pub(crate) fn linear(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        let (m, k, n) = aria_tensor::backend::check::linear_dims(x, w, b)?;
        let mut shape = x.shape().to_vec();
        if let Some(l) = shape.last_mut() {
            *l = n;
        }
        let out = self.alloc(&shape, DType::F32, false)?;
        let g = Gemm::linear(m, k, n)?;
        let (ty, xs, ws) = match w.dtype() {
            DType::F16 | DType::BF16 => {
                let ty = if w.dtype() == DType::F16 {
                    GemmType::F16
                } else {
                    GemmType::Bf16
                };
                let wd = self.on_device(w)?;
                let wc = if wd.is_contiguous() {
                    wd
                } else {
                    self.copy_contiguous(&wd)?
                };
                (ty, self.convert(&self.f32c(x)?, w.dtype())?, wc)
            }
            _ => (GemmType::F32, self.f32c(x)?, self.f32c(w)?),
        };
        if k == 0 {
            let z = self.alloc(&shape, DType::F32, true)?;
            return self.bias(z, b, m, n, false);
        }
        self.gemm(&g, ty, &ws, &xs, &out)?;
        self.bias(out, b, m, n, false)
    }

    /// Add `b` per column (`per_row == false`, rows × cols) or per row period `cols`.
    pub(crate) fn bias(
        &self,
        y: Tensor,
        b: Option<&Tensor>,
        rows: usize,
        cols: usize,
        per_row: bool,
    ) -> Result<Tensor> {
        let Some(b) = b else { return Ok(y) };
        let bc = self.f32c(b)?;
        if rows * cols > 0 {
            let period = if per_row { bc.elem_count() } else { cols };
            self.launch(
                "add_bias_f32",
                launch::elementwise(rows * cols),
                &[
                    KArg::P(self.ptr(&y)?),
                    KArg::P(self.ptr(&bc)?),
                    KArg::U(rows as u64),
                    KArg::U(cols as u64),
                    KArg::U(period.max(1) as u64),
                    KArg::I(i32::from(per_row)),
                ],
            )?;
        }
        Ok(y)
    }

    pub(crate) fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let (batch, m, k, n) = check::matmul_dims(a, b)?;
        let mut shape = a.shape().to_vec();
        if let Some(l) = shape.last_mut() {
            *l = n;
        }
        let out = self.alloc(&shape, DType::F32, k == 0)?;
        if k > 0 {
            let (ac, bc) = (self.f32c(a)?, self.f32c(b)?);
            self.gemm(
                &Gemm::matmul(batch, m, k, n)?,
                GemmType::F32,
                &bc,
                &ac,
                &out,
            )?;
        }
        Ok(out)
    }

    pub(crate) fn conv1d(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        padding: usize,
    ) -> Result<Tensor> {
        let check::ConvDims {
            b: bn,
            cin,
            l,
            cout,
            k,
            lo,
            ..
        } = check::conv1d_dims(x, w, b, padding)?;
        let xc = self.f32c(x)?;
        let wc = self.f32c(w)?;
        let out = self.alloc(&[bn, cout, lo], DType::F32, false)?;
        // A kernel of 1 without padding multiplies the input itself; otherwise im2col first.
        let col = if k == 1 && padding == 0 {
            xc
        } else {
            let col = self.alloc(&[bn, cin * k, lo], DType::F32, false)?;
            let n = bn * cin * k * lo;
            if n > 0 {
                self.launch(
                    "im2col_f32",
                    launch::elementwise(n),
                    &[
                        KArg::P(self.ptr(&xc)?),
                        KArg::P(self.ptr(&col)?),
                        KArg::U(bn as u64),
                        KArg::U(cin as u64),
                        KArg::U(l as u64),
                        KArg::U(k as u64),
                        KArg::U(lo as u64),
                        KArg::U(padding as u64),
                    ],
                )?;
            }
            col
        };
        if cin * k == 0 {
            let z = self.alloc(&[bn, cout, lo], DType::F32, true)?;
            return self.bias(z, b, bn * cout, lo, true);
        }
        self.gemm(
            &Gemm::conv(bn, cout, cin * k, lo)?,
            GemmType::F32,
            &col,
            &wc,
            &out,
        )?;
        self.bias(out, b, bn * cout, lo, true)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        diff: Option<(&Tensor, &Tensor)>,
        scale: f32,
        softcap: Option<f32>,
        key_mask: Option<&Tensor>,
        mask_mode: KeyMaskMode,
        window: Option<(usize, usize)>,
        chunk: usize,
    ) -> Result<Tensor> {
        let a = attention_args(
            q, k, v, diff, scale, softcap, key_mask, mask_mode, window, chunk,
        )?;
        let (b, h, nq, dv) = (a.b as usize, a.h as usize, a.nq as usize, a.dv as usize);
        let (cfg, tk) = launch::attention(b * h, nq, a.d as usize, dv, diff.is_some())?;
        let out = self.alloc(&[b, h, nq, dv], DType::F32, false)?;
        if nq == 0 || dv == 0 || b * h == 0 {
            return Ok(out);
        }
        let (qc, kc, vc) = (self.f32c(q)?, self.f32c(k)?, self.f32c(v)?);
        let (_q2, pq2) = self.opt(diff.map(|d| d.0))?;
        let (_k2, pk2) = self.opt(diff.map(|d| d.1))?;
        let (_m, pm) = self.opt(key_mask)?;
        let args = AttnArgs { tk: tk as u64, ..a };
        self.launch(
            "flash_attn_f32",
            cfg,
            &[
                KArg::P(self.ptr(&qc)?),
                KArg::P(self.ptr(&kc)?),
                KArg::P(self.ptr(&vc)?),
                KArg::P(pq2),
                KArg::P(pk2),
                KArg::P(pm),
                KArg::P(self.ptr(&out)?),
                KArg::A(args),
            ],
        )?;
        Ok(out)
    }

    /// Chunked attention: query `i` sees only the keys of its chunk of `chunk` positions (the
    /// kernel's chunk mode; the op contract has no chunk option yet, so it is called directly).
    /// Shapes and options as `aria_core::ops::attention`.
    pub fn attention_chunked(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        opts: &AttnOpts<'_>,
        chunk: usize,
    ) -> Result<Tensor> {
        if chunk == 0 {
            return Err(CoreError::Invalid(
                "attention_chunked: chunk must be positive".into(),
            ));
        }
        self.attention(
            q,
            k,
            v,
            None,
            opts.scale,
            opts.softcap,
            opts.key_mask,
            opts.mask_mode,
            opts.window,
            chunk,
        )
    }

    pub(crate) fn binary(&self, a: &Tensor, b: &Tensor, f: BinaryOp) -> Result<Tensor> {
        let shape = check::broadcast_shape("binary", a.shape(), b.shape())?;
        let code = match f {
            BinaryOp::Add => 0,
            BinaryOp::Sub => 1,
            BinaryOp::Mul => 2,
            BinaryOp::Div => 3,
            _ => {
                return Err(plan::unsupported(&Op::Binary {
                    a: a.clone(),
                    b: b.clone(),
                    f,
                }))
            }
        };
        let (ac, bc) = (self.f32c(a)?, self.f32c(b)?);
        let st = Strides6::new(
            "binary",
            &shape,
            &broadcast_strides(a.shape(), &shape),
            &broadcast_strides(b.shape(), &shape),
        )?;
        let out = self.alloc(&shape, DType::F32, false)?;
        let n = out.elem_count();
        if n > 0 {
            self.launch(
                "binary_f32",
                launch::elementwise(n),
                &[
                    KArg::P(self.ptr(&ac)?),
                    KArg::P(self.ptr(&bc)?),
                    KArg::P(self.ptr(&out)?),
                    KArg::U(n as u64),
                    KArg::S(st),
                    KArg::I(code),
                ],
            )?;
        }
        Ok(out)
    }

    /// A row kernel `entry(x, [params before y]..., y, d, extra...)` over the last dimension.
    pub(crate) fn row_op(
        &self,
        op: &'static str,
        x: &Tensor,
        entry: &'static str,
        before: &[KArg],
        extra: &[KArg],
    ) -> Result<Tensor> {
        let d = last_dim(op, x)?;
        let xc = self.f32c(x)?;
        let out = self.alloc(x.shape(), DType::F32, false)?;
        let rows = x.elem_count().checked_div(d).unwrap_or(0);
        if rows > 0 {
            let mut args = vec![KArg::P(self.ptr(&xc)?)];
            args.extend_from_slice(before);
            args.push(KArg::P(self.ptr(&out)?));
            args.push(KArg::U(d as u64));
            args.extend_from_slice(extra);
            self.launch(entry, launch::rows(op, rows, d)?, &args)?;
        }
        Ok(out)
    }

    pub(crate) fn glu(&self, x: &Tensor, act: GluAct) -> Result<Tensor> {
        let d2 = last_dim("glu", x)?;
        let code = match act {
            GluAct::Silu => 0,
            GluAct::Gelu => 1,
            GluAct::GeluTanh => 2,
            GluAct::SinPi => 3,
        };
        let f = d2 / 2;
        let rows = x.elem_count().checked_div(d2).unwrap_or(0);
        let mut shape = x.shape().to_vec();
        if let Some(l) = shape.last_mut() {
            *l = f;
        }
        let xc = self.f32c(x)?;
        let out = self.alloc(&shape, DType::F32, false)?;
        if rows * f > 0 {
            self.launch(
                "glu_f32",
                launch::elementwise(rows * f),
                &[
                    KArg::P(self.ptr(&xc)?),
                    KArg::P(self.ptr(&out)?),
                    KArg::U(rows as u64),
                    KArg::U(f as u64),
                    KArg::I(code),
                ],
            )?;
        }
        Ok(out)
    }

    pub(crate) fn rope(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        // Checked by the op set: `x [.., N, D]`, tables `[>= N, R]`.
        let s = x.shape();
        let (n, d) = (s[s.len() - 2], s[s.len() - 1]);
        let r = table_width(cos);
        let (xc, cc, sc) = (self.f32c(x)?, self.f32c(cos)?, self.f32c(sin)?);
        let out = self.alloc(s, DType::F32, false)?;
        let total = x.elem_count();
        if total > 0 {
            self.launch(
                "rope_f32",
                launch::elementwise(total),
                &[
                    KArg::P(self.ptr(&xc)?),
                    KArg::P(self.ptr(&cc)?),
                    KArg::P(self.ptr(&sc)?),
                    KArg::P(self.ptr(&out)?),
                    KArg::U((total / d) as u64),
                    KArg::U(n as u64),
                    KArg::U(d as u64),
                    KArg::U(r as u64),
                ],
            )?;
        }
        Ok(out)
    }

    pub(crate) fn cat(&self, xs: &[Tensor], dim: usize) -> Result<Tensor> {
        let first = xs
            .first()
            .ok_or_else(|| CoreError::Invalid("cat: no tensors".into()))?;
        let r = first.rank();
        if dim >= r {
            return Err(CoreError::shape(
                "cat",
                format!("dim {dim} out of range"),
                &[first.shape()],
            ));
        }
        let mut shape = first.shape().to_vec();
        shape[dim] = 0;
        for t in xs {
            let s = t.shape();
            if s.len() != r
                || t.dtype() != first.dtype()
                || (0..r).any(|i| i != dim && s[i] != first.shape()[i])
            {
                return Err(CoreError::shape(
                    "cat",
                    "tensors differ outside the cat dim (or in dtype)",
                    &[first.shape(), s],
                ));
            }
            shape[dim] += s[dim];
        }
        let out = self.alloc(&shape, first.dtype(), false)?;
        let os = contiguous_strides(&shape);
        let mut at = 0;
        for t in xs {
            let td = self.on_device(t)?;
            self.strided_copy(&td, td.strides(), &out, at * os[dim], &os)?;
            at += t.shape()[dim];
        }
        Ok(out)
    }

    pub(crate) fn pad(
        &self,
        x: &Tensor,
        dim: usize,
        before: usize,
        after: usize,
    ) -> Result<Tensor> {
        if dim >= x.rank() {
            return Err(CoreError::shape(
                "pad",
                format!("dim {dim} out of range"),
                &[x.shape()],
            ));
        }
        let mut shape = x.shape().to_vec();
        shape[dim] += before + after;
        let out = self.alloc(&shape, x.dtype(), true)?;
        let os = contiguous_strides(&shape);
        let xd = self.on_device(x)?;
        self.strided_copy(&xd, xd.strides(), &out, before * os[dim], &os)?;
        Ok(out)
    }
}
