//! The op set on the device: operand preparation and the launches of each op. Shapes and dtypes
//! were checked by the op set's check step ([`Op::check`], run by `CudaBackend::run`): the
//! sizes are read here, never re-validated.

mod layers;
mod packed;
mod sampler;
mod shapes;

use aria_tensor::backend::Op;
use aria_tensor::options::{self as cpu, RmsStyle};
use aria_tensor::{Backend, CoreError, DType, Result, Tensor};

use crate::backend::{CudaBackend, KArg};
use crate::launch;
use crate::plan;
pub(crate) use packed::{check_blocks, PACKED_FORMATS};
use shapes::table_width;
pub use shapes::{attention_args, broadcast_strides};

pub(crate) fn last_dim(op: &'static str, x: &Tensor) -> Result<usize> {
    x.shape()
        .last()
        .copied()
        .ok_or_else(|| CoreError::shape(op, "scalar input", &[x.shape()]))
}

pub(crate) fn dims3(op: &'static str, t: &Tensor) -> Result<[usize; 3]> {
    aria_tensor::backend::check::dims3(op, "x", t)
}

/// Run one routed op.
pub(crate) fn run(be: &CudaBackend, op: &Op) -> Result<Tensor> {
    match op {
        Op::Linear { x, w, b, .. } => be.linear(x, w, b.as_ref()),
        Op::Matmul { a, b } => be.matmul(a, b),
        Op::Conv1d { x, w, b, padding } => be.conv1d(x, w, b.as_ref(), *padding),
        Op::Attention {
            q,
            k,
            v,
            diff,
            opts,
        } => be.attention(
            q,
            k,
            v,
            diff.as_ref().map(|(a, b)| (a, b)),
            opts.scale,
            opts.softcap,
            opts.key_mask.as_ref(),
            opts.mask_mode,
            opts.window,
            0,
        ),
        Op::Unary { x, f } => {
            let code = plan::unary_code(*f).ok_or_else(|| plan::unsupported(op))?;
            be.map1(x, "unary_f32", &[KArg::I(code)])
        }
        Op::Affine { x, a, b } => be.map1(x, "affine_f32", &[KArg::F(*a), KArg::F(*b)]),
        Op::MulScalar { x, s } => be.map1(x, "affine_f32", &[KArg::F(*s), KArg::F(0.0)]),
        Op::AddScalar { x, s } => be.map1(x, "affine_f32", &[KArg::F(1.0), KArg::F(*s)]),
        Op::Binary { a, b, f } => be.binary(a, b, *f),
        Op::Glu { x, act } => be.glu(x, *act),
        Op::Softmax { x } => be.row_op("softmax", x, "softmax_f32", &[], &[]),
        Op::Rope { x, cos, sin } => be.rope(x, cos, sin),
        Op::RmsNorm { x, w, eps, style } => {
            let (_w, pw) = be.opt(w.as_ref())?;
            let style = i32::from(*style == RmsStyle::OnePlus);
            be.row_op(
                "rms_norm",
                x,
                "rms_norm_f32",
                &[KArg::P(pw)],
                &[KArg::F(*eps), KArg::I(style)],
            )
        }
        Op::LayerNorm { x, w, b, eps } => {
            let (_w, pw) = be.opt(w.as_ref())?;
            let (_b, pb) = be.opt(b.as_ref())?;
            be.row_op(
                "layer_norm",
                x,
                "layer_norm_f32",
                &[KArg::P(pw), KArg::P(pb)],
                &[KArg::F(*eps)],
            )
        }
        Op::Dyt {
            x,
            alpha,
            gamma,
            beta,
        } => {
            let d = last_dim("dyt", x)?;
            let (_g, pg) = be.opt(Some(gamma))?;
            let (_b, pb) = be.opt(Some(beta))?;
            if d == 0 {
                return be.alloc(x.shape(), DType::F32, true);
            }
            be.map1_rows(
                x,
                "dyt_f32",
                &[KArg::P(pg), KArg::P(pb)],
                d,
                &[KArg::F(*alpha)],
            )
        }
        Op::Unfold { x, k } => {
            let s = x.shape();
            let (b, l, c) = (s[0], s[1], s[2]);
            let xc = be.f32c(x)?;
            let out = be.alloc(&[b, l, k * c], DType::F32, false)?;
            let n = b * l * k * c;
            if n > 0 {
                be.launch(
                    "unfold_f32",
                    launch::elementwise(n),
                    &[
                        KArg::P(be.ptr(&xc)?),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(b as u64),
                        KArg::U(l as u64),
                        KArg::U(c as u64),
                        KArg::U(*k as u64),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::Contiguous { x } => {
            let xd = be.on_device(x)?;
            if xd.is_contiguous() {
                Ok(xd)
            } else {
                be.copy_contiguous(&xd)
            }
        }
        Op::ToDtype { x, dtype } => {
            let xd = be.on_device(x)?;
            let xd = if xd.is_contiguous() {
                xd
            } else {
                be.copy_contiguous(&xd)?
            };
            be.convert(&xd, *dtype)
        }
        Op::Cat { xs, dim } => be.cat(xs, *dim),
        Op::Pad {
            x,
            dim,
            before,
            after,
        } => be.pad(x, *dim, *before, *after),
        Op::RmsNormModulate {
            x,
            gamma,
            eps,
            scale_shift,
        } => {
            let [b, n, e] = dims3("rms_norm_modulate", x)?;
            let (_g, pg) = be.opt(Some(gamma))?;
            let (_s, ps) = be.opt(scale_shift.as_ref().map(|s| &s.0))?;
            let (_h, ph) = be.opt(scale_shift.as_ref().map(|s| &s.1))?;
            let xc = be.f32c(x)?;
            let out = be.alloc(x.shape(), DType::F32, false)?;
            if b * n > 0 && e > 0 {
                be.launch(
                    "rms_norm_modulate_f32",
                    launch::rows("rms_norm_modulate", b * n, e)?,
                    &[
                        KArg::P(be.ptr(&xc)?),
                        KArg::P(pg),
                        KArg::P(ps),
                        KArg::P(ph),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(n as u64),
                        KArg::U(e as u64),
                        KArg::F(*eps),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::GatedResidualAdd {
            h,
            u,
            gate,
            row_mask,
        } => {
            const OP: &str = "gated_residual_add";
            let [b, n, e] = dims3(OP, h)?;
            let [_, nu, _] = dims3(OP, u)?;
            let (hc, uc) = (be.f32c(h)?, be.f32c(u)?);
            let (_g, pg) = be.opt(gate.as_ref())?;
            let (_m, pm) = be.opt(row_mask.as_ref())?;
            let out = be.alloc(h.shape(), DType::F32, false)?;
            let total = b * n * e;
            if total > 0 {
                be.launch(
                    "gated_residual_add_f32",
                    launch::elementwise(total),
                    &[
                        KArg::P(be.ptr(&hc)?),
                        KArg::P(be.ptr(&uc)?),
                        KArg::P(pg),
                        KArg::P(pm),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(b as u64),
                        KArg::U(n as u64),
                        KArg::U(nu as u64),
                        KArg::U(e as u64),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::SplitHeads {
            x,
            col,
            heads,
            head_dim,
            norm,
            rope,
        } => {
            const OP: &str = "split_heads";
            let [b, n, w] = dims3(OP, x)?;
            let d = *head_dim;
            let r = rope.as_ref().map_or(0, |(c, _)| table_width(c));
            let xc = be.f32c(x)?;
            let (_g, pg) = be.opt(norm.as_ref().map(|n| &n.0))?;
            let (_c, pc) = be.opt(rope.as_ref().map(|r| &r.0))?;
            let (_s, ps) = be.opt(rope.as_ref().map(|r| &r.1))?;
            let out = be.alloc(&[b, *heads, n, d], DType::F32, false)?;
            let vectors = b * heads * n;
            if vectors > 0 && d > 0 {
                be.launch(
                    "split_heads_f32",
                    launch::split_heads(vectors, d)?,
                    &[
                        KArg::P(be.ptr(&xc)?),
                        KArg::P(pg),
                        KArg::P(pc),
                        KArg::P(ps),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(n as u64),
                        KArg::U(w as u64),
                        KArg::U(*col as u64),
                        KArg::U(*heads as u64),
                        KArg::U(d as u64),
                        KArg::F(norm.as_ref().map_or(0.0, |n| n.1)),
                        KArg::U(r as u64),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::MergeHeads { x, row_mask } => {
            let &[b, h, n, d] = x.shape() else {
                return Err(CoreError::shape(
                    "merge_heads",
                    "x must be [B, H, N, D]",
                    &[x.shape()],
                ));
            };
            let xc = be.f32c(x)?;
            let (_m, pm) = be.opt(row_mask.as_ref())?;
            let out = be.alloc(&[b, n, h * d], DType::F32, false)?;
            let total = b * h * n * d;
            if total > 0 {
                be.launch(
                    "merge_heads_f32",
                    launch::elementwise(total),
                    &[
                        KArg::P(be.ptr(&xc)?),
                        KArg::P(pm),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(b as u64),
                        KArg::U(h as u64),
                        KArg::U(n as u64),
                        KArg::U(d as u64),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::Axpby { a, x, b, y } => {
            let items = x.shape().first().copied().unwrap_or(1);
            let at = be.upload(&Tensor::from_vec(a.clone(), &[items])?)?;
            let bt = be.upload(&Tensor::from_vec(b.clone(), &[items])?)?;
            be.axpby_device(&at, x, &bt, y)
        }
        Op::StdLast { x } => {
            let d = last_dim("std_last", x)?;
            let xc = be.f32c(x)?;
            let mut shape = x.shape().to_vec();
            if let Some(l) = shape.last_mut() {
                *l = 1;
            }
            let rows = x.elem_count().checked_div(d).unwrap_or(0);
            let out = be.alloc(&shape, DType::F32, false)?;
            if rows > 0 {
                be.launch(
                    "std_last_f32",
                    launch::rows("std_last", rows, d)?,
                    &[
                        KArg::P(be.ptr(&xc)?),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(d as u64),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::FourierFeatures {
            values,
            freqs,
            layout,
        } => {
            let (n, f) = (values.elem_count(), freqs.elem_count());
            let (dim, code) = match layout {
                cpu::FourierLayout::CosSin => (2 * f, 0),
                cpu::FourierLayout::ValueSinCos => (2 * f + 1, 1),
            };
            let (vc, fc) = (be.f32c(values)?, be.f32c(freqs)?);
            let out = be.alloc(&[n, dim], DType::F32, false)?;
            if n > 0 && f == 0 && code == 1 {
                // Only the value column: a copy.
                be.strided_copy(&vc, &[1], &out, 0, &[dim])?;
            } else if n * f > 0 {
                be.launch(
                    "fourier_features_f32",
                    launch::elementwise(n * f),
                    &[
                        KArg::P(be.ptr(&vc)?),
                        KArg::P(be.ptr(&fc)?),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(n as u64),
                        KArg::U(f as u64),
                        KArg::I(code),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::Embedding { ids, table } => embedding(be, ids, table),
        Op::FillMaskedRows { x, mask, fill } => {
            let s = x.shape();
            let d = s.last().copied().unwrap_or(0);
            let (xc, mc) = (be.f32c(x)?, be.f32c(mask)?);
            let (_f, pf) = be.opt(fill.as_ref())?;
            let out = be.alloc(s, DType::F32, false)?;
            let rows = mask.elem_count();
            if rows * d > 0 {
                be.launch(
                    "fill_masked_rows_f32",
                    launch::elementwise(rows * d),
                    &[
                        KArg::P(be.ptr(&xc)?),
                        KArg::P(be.ptr(&mc)?),
                        KArg::P(pf),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(rows as u64),
                        KArg::U(d as u64),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::ApgGuidance {
            x,
            v_cond,
            v_uncond,
            sigma,
            mask,
            cfg_scale,
            apg_scale,
            norm_threshold,
        } => {
            let sig = be.upload(&Tensor::from_vec(sigma.clone(), &[sigma.len()])?)?;
            be.apg_guidance_device(
                x,
                v_cond,
                v_uncond,
                &sig,
                mask.as_ref(),
                [*cfg_scale, *apg_scale, *norm_threshold],
            )
        }
        Op::QkvHeads {
            x,
            parts,
            part,
            heads,
            alpha,
            norm,
            rope,
        } => {
            let (parts, part, heads) = (*parts, *part, *heads);
            let (b, n, dh) = aria_tensor::backend::check::qkv_dims(
                x,
                parts,
                part,
                heads,
                rope.as_ref().map(|r| &r.0),
            )?;
            let r = rope.as_ref().map_or(0, |(c, _)| table_width(c));
            let xc = be.f32c(x)?;
            let (_g, pg) = be.opt(norm.as_ref().map(|n| &n.0))?;
            let (_b, pb) = be.opt(norm.as_ref().map(|n| &n.1))?;
            let (_c, pc) = be.opt(rope.as_ref().map(|r| &r.0))?;
            let (_s, ps) = be.opt(rope.as_ref().map(|r| &r.1))?;
            let out = be.alloc(&[b, heads, n, dh], DType::F32, false)?;
            let total = out.elem_count();
            if total > 0 {
                be.launch(
                    "qkv_heads_f32",
                    launch::elementwise(total),
                    &[
                        KArg::P(be.ptr(&xc)?),
                        KArg::P(pg),
                        KArg::P(pb),
                        KArg::P(pc),
                        KArg::P(ps),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(b as u64),
                        KArg::U(n as u64),
                        KArg::U(parts as u64),
                        KArg::U(part as u64),
                        KArg::U(heads as u64),
                        KArg::U(dh as u64),
                        KArg::F(*alpha),
                        KArg::U(r as u64),
                    ],
                )?;
            }
            Ok(out)
        }
        Op::LinearPacked {
            x,
            w,
            format,
            w8a8,
            shape,
            b,
        } => be.linear_packed(x, w, *format, *w8a8, *shape, b.as_ref()),
        Op::CfgRescale { v, v_cond, phi } => be.cfg_rescale(v, v_cond, *phi),
        Op::RopeTable { inv_freq, pos0, n } => {
            let f = inv_freq.elem_count();
            let fc = be.f32c(inv_freq)?;
            let out = be.alloc(&[2, *n, 2 * f], DType::F32, false)?;
            if n * f > 0 {
                be.launch(
                    "rope_table_f32",
                    launch::elementwise(n * f),
                    &[
                        KArg::P(be.ptr(&fc)?),
                        KArg::P(be.ptr(&out)?),
                        KArg::U(f as u64),
                        KArg::U(*pos0 as u64),
                        KArg::U(*n as u64),
                    ],
                )?;
            }
            Ok(out)
        }
        _ => Err(plan::unsupported(op)),
    }
}

/// `embedding` (see `kernels/text.cu`): ids still on the host are checked there, exactly as the
/// CPU op checks them, and uploaded as i64; device ids must already be i64.
fn embedding(be: &CudaBackend, ids: &Tensor, table: &Tensor) -> Result<Tensor> {
    // Checked by the op set: `table [V, D]`, a float dtype.
    let ts = table.shape();
    let (vocab, d) = (ts[0], ts[1]);
    let idc = if ids.device().is_cpu() {
        let idv: Vec<i64> = match ids.dtype() {
            DType::I64 => ids.contiguous()?.to_vec::<i64>()?,
            _ => ids.to_vec_f32()?.iter().map(|&x| x as i64).collect(),
        };
        if let Some(&id) = idv.iter().find(|&&id| id < 0 || id as usize >= vocab) {
            return Err(CoreError::Invalid(format!(
                "embedding: id {id} outside a vocabulary of {vocab}"
            )));
        }
        be.upload(&Tensor::from_vec(idv, &[ids.elem_count()])?)?
    } else if ids.dtype() == DType::I64 {
        if ids.is_contiguous() {
            ids.clone()
        } else {
            be.copy_contiguous(ids)?
        }
    } else {
        return Err(CoreError::DType {
            op: "embedding",
            dtype: ids.dtype(),
            reason: "ids on the CUDA device must be i64".into(),
        });
    };
    let tc = be.f32c(table)?;
    let mut shape = ids.shape().to_vec();
    shape.push(d);
    let n = ids.elem_count();
    let out = be.alloc(&shape, DType::F32, false)?;
    if n * d > 0 {
        be.launch(
            "embedding_f32",
            launch::elementwise(n * d),
            &[
                KArg::P(be.ptr(&idc)?),
                KArg::P(be.ptr(&tc)?),
                KArg::P(be.ptr(&out)?),
                KArg::U(n as u64),
                KArg::U(vocab as u64),
                KArg::U(d as u64),
            ],
        )?;
    }
    Ok(out)
}
