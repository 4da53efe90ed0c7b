//! Data movement (`layout.wgsl`): strided copies and dtype conversions of any dtype
//! (`contiguous`, `to_dtype`, `cat`, `pad`), and `unfold`, `embedding`. The copies and
//! `embedding` run buffer by buffer on tensors past one binding.

use super::{f32_in, go, go_binds, out_parts, parts, u32_of, view_span, Grid, LAYOUT};
use crate::{be_err, Bind, Uniforms, WgpuBackend};
use aria_tensor::storage::Storage;
use aria_tensor::{CoreError, DType, Result, Tensor};

/// The dtype codes of `layout.wgsl`.
fn code(d: DType) -> u32 {
    match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::I8 => 3,
        DType::U8 => 4,
        DType::I64 => 5,
    }
}

/// `t` on this device as it is (a view keeps its strides); CPU tensors are uploaded.
fn on_device(be: &WgpuBackend, t: &Tensor) -> Result<Tensor> {
    match &**t.storage() {
        Storage::Device(_) => {
            be.storage_of(t)?;
            Ok(t.clone())
        }
        _ => be.operand(t),
    }
}

/// Copy the view `src` into the slot `lo..lo + src.shape()[dim]` along `dim` of `out` (a fresh
/// contiguous tensor of `src`'s rank), converting to `out`'s dtype when the dtypes differ
/// (through the f32 value, as the CPU's `to_dtype`). Elements of `out` outside the slot keep their value.
fn gather_into(be: &WgpuBackend, src: &Tensor, out: &Tensor, dim: usize, lo: usize) -> Result<()> {
    if src.elem_count() == 0 {
        return Ok(());
    }
    let src = on_device(be, src)?;
    let (mut shape, mut strides) = (out.shape().to_vec(), src.strides().to_vec());
    let (mut dim, mut lo, mut hi) = (dim, lo, lo + src.shape().get(dim).copied().unwrap_or(1));
    if shape.is_empty() {
        (shape, strides, dim, lo, hi) = (vec![1], vec![0], 0, 0, 1);
    }
    // Drop size-1 dimensions and fold dimensions (outside the slot's) whose layouts are affine
    // together, so that views of any rank fit the kernel's six.
    let mut i = 0;
    while shape.len() > 6 && i < shape.len() {
        if i != dim && shape[i] == 1 {
            shape.remove(i);
            strides.remove(i);
            if dim > i {
                dim -= 1;
            }
        } else {
            i += 1;
        }
    }
    let mut i = 0;
    while shape.len() > 6 && i + 1 < shape.len() {
        if i != dim && i + 1 != dim && strides[i] == strides[i + 1] * shape[i + 1] {
            shape[i + 1] *= shape[i];
            shape.remove(i);
            strides.remove(i);
            if dim > i {
                dim -= 1;
            }
        } else {
            i += 1;
        }
    }
    if shape.len() > 6 {
        return Err(be_err(format!(
            "copying a {:?} view (strides {:?}) needs more than 6 dimensions",
            src.shape(),
            src.strides()
        )));
    }
    let n = out.elem_count();
    let es = out.dtype().size();
    // Past one binding, each output buffer is written from each source buffer it reads (the
    // kernel skips elements whose source lies in another buffer).
    let whole_slot = lo == 0 && hi == shape.get(dim).copied().unwrap_or(1);
    let (ss, sst, so) = (src.shape(), src.strides(), src.offset());
    for (obuf, e0, e1) in out_parts(be, out)? {
        let span = if whole_slot {
            view_span(ss, sst, so, e0, e1)
        } else {
            view_span(ss, sst, so, 0, src.elem_count())
        };
        let words = ((e1 - e0) * es).div_ceil(4);
        for (sbuf, s_lo, s_hi) in parts(be, &src, span)? {
            let mut u = Uniforms::new()
                .size("words", words)?
                .u32(shape.len() as u32)
                .u32(code(src.dtype()))
                .u32(code(out.dtype()));
            for k in 0..6 {
                u = u.size("shape", shape.get(k).copied().unwrap_or(1))?;
            }
            for k in 0..6 {
                u = u.size("stride", strides.get(k).copied().unwrap_or(0))?;
            }
            let u = u
                .size("source offset", so)?
                .size("dim", dim)?
                .size("slot", lo)?
                .size("slot", hi)?
                .size("elements", n)?
                .size("first word", e0 * es / 4)?
                .u32(s_lo)
                .u32(s_hi);
            // Each invocation owns one output word (no two write the same one).
            go_binds(
                be,
                &LAYOUT,
                "gather",
                &[Bind::Buf(obuf), Bind::Buf(sbuf)],
                u,
                Grid::Elems(words),
            )?;
        }
    }
    Ok(())
}

pub(super) fn contiguous(be: &WgpuBackend, x: &Tensor) -> Result<Tensor> {
    let xd = on_device(be, x)?;
    if xd.is_contiguous() {
        return Ok(xd);
    }
    let out = be.alloc(x.shape(), x.dtype())?;
    gather_into(be, &xd, &out, 0, 0)?;
    Ok(out)
}

pub(super) fn to_dtype(be: &WgpuBackend, x: &Tensor, dtype: DType) -> Result<Tensor> {
    if dtype == x.dtype() {
        return contiguous(be, x);
    }
    let out = be.alloc(x.shape(), dtype)?;
    gather_into(be, x, &out, 0, 0)?;
    Ok(out)
}

pub(super) fn cat(be: &WgpuBackend, xs: &[Tensor], dim: usize) -> Result<Tensor> {
    let refs: Vec<&Tensor> = xs.iter().collect();
    let spec = aria_tensor::backend::check::cat_spec(&refs, dim)?;
    let out = be.alloc(&spec.shape, spec.dtype)?;
    let mut at = 0;
    for t in xs {
        gather_into(be, t, &out, dim, at)?;
        at += t.shape()[dim];
    }
    Ok(out)
}

pub(super) fn pad(
    be: &WgpuBackend,
    x: &Tensor,
    dim: usize,
    before: usize,
    after: usize,
) -> Result<Tensor> {
    // Checked by the op set: `dim < rank`.
    let s = x.shape();
    if before == 0 && after == 0 {
        return contiguous(be, x);
    }
    let mut shape = s.to_vec();
    shape[dim] += before + after;
    // Fresh buffers are zero-filled: only the interior is written.
    let out = be.alloc(&shape, x.dtype())?;
    gather_into(be, x, &out, dim, before)?;
    Ok(out)
}

pub(super) fn unfold(be: &WgpuBackend, x: &Tensor, k: usize) -> Result<Tensor> {
    // Checked by the op set: `x [B, L, C]`, `k` odd.
    let s = x.shape();
    let (b, l, c) = (s[0], s[1], s[2]);
    let out = be.alloc(&[b, l, k * c], DType::F32)?;
    let total = out.elem_count();
    if total == 0 {
        return Ok(out);
    }
    let (xc, xo) = f32_in(be, x)?;
    let u = Uniforms::new()
        .size("total", total)?
        .size("l", l)?
        .size("c", c)?
        .size("k", k)?
        .u32(xo);
    go(
        be,
        &LAYOUT,
        "unfold",
        &out,
        &[Bind::T(&xc)],
        u,
        Grid::Elems(total),
    )?;
    Ok(out)
}

pub(super) fn embedding(be: &WgpuBackend, ids: &Tensor, table: &Tensor) -> Result<Tensor> {
    // Checked by the op set: `table [V, D]`, a float dtype.
    let ts = table.shape();
    let (vocab, d) = (ts[0], ts[1]);
    // Ids still on the host are checked there, exactly as the CPU op checks them.
    if ids.device().is_cpu() {
        let idv: Vec<i64> = match ids.dtype() {
            DType::I64 => ids.to_vec::<i64>()?,
            _ => ids.to_vec_f32()?.iter().map(|&x| x as i64).collect(),
        };
        if let Some(&id) = idv.iter().find(|&&id| id < 0 || id as usize >= vocab) {
            return Err(CoreError::Invalid(format!(
                "embedding: id {id} outside a vocabulary of {vocab}"
            )));
        }
    }
    let mut shape = ids.shape().to_vec();
    shape.push(d);
    let out = be.alloc(&shape, DType::F32)?;
    let total = out.elem_count();
    if total == 0 {
        return Ok(out);
    }
    let (idc, id_code) = if ids.dtype() == DType::I64 {
        (be.operand(ids)?, 5)
    } else {
        (be.operand_as_f32(ids)?, 0)
    };
    let tc = be.operand(table)?;
    let (ibuf, io) = be.binding_of(&idc)?;
    let to = tc.offset();
    u32_of("vocabulary", vocab)?;
    u32_of("table elements", to + vocab * d)?;
    let tspan = view_span(tc.shape(), tc.strides(), to, 0, tc.elem_count());
    let tparts = parts(be, &tc, tspan)?;
    // A table past one binding (as the text encoder's) is read one buffer (of whole rows) at a
    // time; each pass writes the output elements whose row lies in its buffer.
    for (obuf, e0, e1) in out_parts(be, &out)? {
        for &(tbuf, t_lo, t_hi) in &tparts {
            let u = Uniforms::new()
                .size("total", e1 - e0)?
                .size("d", d)?
                .size("vocab", vocab)?
                .u32(id_code)
                .u32(io)
                .u32(code(tc.dtype()))
                .size("table offset", to)?
                .size("first element", e0)?
                .u32(t_lo)
                .u32(t_hi);
            go_binds(
                be,
                &LAYOUT,
                "embedding",
                &[Bind::Buf(obuf), Bind::Buf(ibuf), Bind::Buf(tbuf)],
                u,
                Grid::Elems(e1 - e0),
            )?;
        }
    }
    Ok(out)
}
