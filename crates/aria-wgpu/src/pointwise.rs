//! Elementwise, row and data-movement ops on the device: every op of the contract except the
//! products and attention (see `dispatch`).
//!
//! # Kernels
//!
//! | op | shader :: entry | notes |
//! |---|---|---|
//! | `unary` | `elementwise.wgsl::unary` | silu, sigmoid, tanh, sin(π·x), gelu (erf), gelu (tanh) |
//! | `affine`, `mul_scalar`, `add_scalar` | `elementwise.wgsl::affine` | |
//! | `binary` | `elementwise.wgsl::binary` | NumPy broadcasting; strided f32 views read in place (rank ≤ 6) |
//! | `glu` | `elementwise.wgsl::glu` | every gate kind |
//! | `axpby` | `elementwise.wgsl::axpby` | the per-item scalars travel as a small storage buffer |
//! | `dyt` | `elementwise.wgsl::dyt` | |
//! | `softmax`, `rms_norm`, `layer_norm`, `std_last`, `rms_norm_modulate` | `norm.wgsl` | one workgroup per row, tree sums; scale/shift views read in place |
//! | `rope`, `rope_table` | `rope.wgsl` | |
//! | `gated_residual_add`, `split_heads`, `merge_heads`, `qkv_heads` | `fused.wgsl` | gate views read in place |
//! | `apg_guidance` | `guidance.wgsl` | one workgroup per item; compensated f32 sums (no f64 in WGSL) |
//! | `fourier_features`, `fill_masked_rows` | `text.wgsl` | |
//! | `contiguous`, `to_dtype`, `cat`, `pad` | `layout.wgsl::gather` | any dtype, strided/broadcast views; conversions through the f32 value as on the CPU (floats round to nearest even; integers truncate and saturate, NaN → 0) |
//! | `unfold`, `embedding` | `layout.wgsl` | |
//!
//! The `torch_bf16_*` replay ops are not implemented here (they reproduce PyTorch's AVX2 bf16
//! arithmetic bit for bit, which is a CPU matter): they are [`CoreError::Unsupported`].
//!
//! Every shader starts with `common.wgsl` (parameters, index helpers) and `math.wgsl` (`tanh`,
//! `erfc`, `sin`/`cos` written out, since WGSL's built-ins promise less accuracy than the
//! reference needs); the row kernels' also with `reduce.wgsl` (the workgroup tree sum). Workgroups have [`Knobs::elementwise`](super::Knobs) invocations (rounded down to
//! a power of two within the device's limits; default 256 on discrete GPUs, 64 elsewhere);
//! element kernels spread their workgroups over a 2-D grid when one dimension's limit is not
//! enough, row kernels run one workgroup per row on the same grid.
//!
//! Differences from the CPU ops: sums run as trees instead of sequentially (f32 results agree
//! to a few ulp, `apg_guidance` to ~1e-6 relative); `embedding` with ids already on the device
//! gives a zero row for an id outside the vocabulary (CPU ids are checked, as on the CPU,
//! before they are uploaded).
//!
//! Tensors past one storage binding (stored as several buffers of whole rows, see `buffer`;
//! the text encoder's embedding table is one): `unary`, `affine`, `mul_scalar`, `add_scalar`,
//! `axpby`, `dyt`, `rms_norm`, `layer_norm` and `softmax` run buffer by buffer (operands of
//! the same shape); `binary` (any broadcast or view), the layout copies (`contiguous`,
//! `to_dtype`, `cat`, `pad`) and `embedding` run once per pair of an output buffer and an
//! operand buffer it reads, the kernel skipping elements whose operand lies in another buffer
//! (pairs that cannot meet are not launched: see `view_span`). Every other op needs each
//! operand within one binding and says so by name otherwise.

mod elementwise;
mod heads;
mod layout;
mod rows;

use super::launch::shader;
use super::{Bind, Shader, Uniforms, WgpuBackend};
use aria_tensor::backend::Op;
use aria_tensor::storage::Storage;
use aria_tensor::{CoreError, DType, Result, Tensor};

/// Run `op` if it is one of this module's; `None` hands it back (the dispatcher then reports
/// it as unsupported).
pub(crate) fn run(be: &WgpuBackend, op: &Op) -> Option<Result<Tensor>> {
    Some(match op {
        Op::Unary { x, f } => elementwise::unary(be, x, *f),
        Op::Affine { x, a, b } => elementwise::affine(be, x, *a, Some(*b)),
        Op::MulScalar { x, s } => elementwise::affine(be, x, *s, None),
        Op::AddScalar { x, s } => elementwise::affine(be, x, 1.0, Some(*s)),
        Op::Binary { a, b, f } => elementwise::binary(be, a, b, *f),
        Op::Glu { x, act } => elementwise::glu(be, x, *act),
        Op::Axpby { a, x, b, y } => elementwise::axpby(be, a, x, b, y),
        Op::Dyt {
            x,
            alpha,
            gamma,
            beta,
        } => elementwise::dyt(be, x, *alpha, gamma, beta),
        Op::FourierFeatures {
            values,
            freqs,
            layout,
        } => elementwise::fourier_features(be, values, freqs, *layout),
        Op::FillMaskedRows { x, mask, fill } => {
            elementwise::fill_masked_rows(be, x, mask, fill.as_ref())
        }
        Op::Softmax { x } => rows::softmax(be, x),
        Op::RmsNorm { x, w, eps, style } => rows::rms_norm(be, x, w.as_ref(), *eps, *style),
        Op::LayerNorm { x, w, b, eps } => rows::layer_norm(be, x, w.as_ref(), b.as_ref(), *eps),
        Op::StdLast { x } => rows::std_last(be, x),
        Op::RmsNormModulate {
            x,
            gamma,
            eps,
            scale_shift,
        } => rows::rms_norm_modulate(be, x, gamma, *eps, scale_shift.as_ref()),
        Op::Rope { x, cos, sin } => heads::rope(be, x, cos, sin),
        Op::RopeTable { inv_freq, pos0, n } => heads::rope_table(be, inv_freq, *pos0, *n),
        Op::GatedResidualAdd {
            h,
            u,
            gate,
            row_mask,
        } => heads::gated_residual_add(be, h, u, gate.as_ref(), row_mask.as_ref()),
        Op::SplitHeads {
            x,
            col,
            heads: h,
            head_dim,
            norm,
            rope,
        } => heads::split_heads(be, x, *col, *h, *head_dim, norm.as_ref(), rope.as_ref()),
        Op::MergeHeads { x, row_mask } => heads::merge_heads(be, x, row_mask.as_ref()),
        Op::QkvHeads {
            x,
            parts,
            part,
            heads: h,
            alpha,
            norm,
            rope,
        } => heads::qkv_heads(
            be,
            x,
            [*parts, *part, *h],
            *alpha,
            norm.as_ref(),
            rope.as_ref(),
        ),
        Op::CfgRescale { v, v_cond, phi } => heads::cfg_rescale(be, v, v_cond, *phi),
        Op::ApgGuidance {
            x,
            v_cond,
            v_uncond,
            sigma,
            mask,
            cfg_scale,
            apg_scale,
            norm_threshold,
        } => heads::apg_guidance(
            be,
            [x, v_cond, v_uncond],
            sigma,
            mask.as_ref(),
            [*cfg_scale, *apg_scale, *norm_threshold],
        ),
        Op::Contiguous { x } => layout::contiguous(be, x),
        Op::ToDtype { x, dtype } => layout::to_dtype(be, x, *dtype),
        Op::Cat { xs, dim } => layout::cat(be, xs, *dim),
        Op::Pad {
            x,
            dim,
            before,
            after,
        } => layout::pad(be, x, *dim, *before, *after),
        Op::Unfold { x, k } => layout::unfold(be, x, *k),
        Op::Embedding { ids, table } => layout::embedding(be, ids, table),
        _ => return None,
    })
}

// `common.wgsl` and `math.wgsl` before every shader file; `reduce.wgsl` (the workgroup tree
// sum) before the row kernels'.
const ELEMENTWISE: Shader = shader!("elementwise.wgsl", "common.wgsl", "math.wgsl");
const NORM: Shader = shader!("norm.wgsl", "common.wgsl", "math.wgsl", "reduce.wgsl");
const ROPE: Shader = shader!("rope.wgsl", "common.wgsl", "math.wgsl");
const FUSED: Shader = shader!("fused.wgsl", "common.wgsl", "math.wgsl", "reduce.wgsl");
const GUIDANCE: Shader = shader!("guidance.wgsl", "common.wgsl", "math.wgsl", "reduce.wgsl");
const TEXT: Shader = shader!("text.wgsl", "common.wgsl", "math.wgsl");
const LAYOUT: Shader = shader!("layout.wgsl", "common.wgsl", "math.wgsl");

/// Workgroup size: the `elementwise` knob rounded down to a power of two (the row kernels'
/// tree sums need one) within the device's per-workgroup limits.
fn wg_size(be: &WgpuBackend) -> u32 {
    let l = be.limits();
    let cap = l
        .max_compute_invocations_per_workgroup
        .min(l.max_compute_workgroup_size_x)
        .clamp(1, 1024);
    let v = be.knobs().elementwise.clamp(1, cap);
    1 << (31 - v.leading_zeros())
}

/// How a kernel covers its work.
enum Grid {
    /// One invocation per element.
    Elems(usize),
    /// One workgroup per row.
    Rows(usize),
}

/// Launch `entry` with the output at binding 1 and `ins` at bindings 2.. (nothing runs for an
/// empty grid).
fn go(
    be: &WgpuBackend,
    shader: &Shader,
    entry: &'static str,
    out: &Tensor,
    ins: &[Bind<'_>],
    u: Uniforms,
    grid: Grid,
) -> Result<()> {
    let mut binds = Vec::with_capacity(ins.len() + 1);
    binds.push(Bind::T(out));
    binds.extend_from_slice(ins);
    go_binds(be, shader, entry, &binds, u, grid)
}

/// [`go`] with the output already first in `binds`.
fn go_binds(
    be: &WgpuBackend,
    shader: &Shader,
    entry: &'static str,
    binds: &[Bind<'_>],
    u: Uniforms,
    grid: Grid,
) -> Result<()> {
    let wg = wg_size(be);
    let groups = match grid {
        Grid::Elems(0) | Grid::Rows(0) => return Ok(()),
        Grid::Elems(n) => be.groups_1d(n, wg)?,
        Grid::Rows(n) => be.groups_1d(n, 1)?,
    };
    be.launch(shader, entry, &[("WG", wg)], binds, u, groups)
}

/// Same-shape contiguous f32 tensors stored in several buffers (past one binding; chunks of
/// whole rows, the same for every tensor of one shape): calls `f` once per chunk with the
/// chunk's buffers (in `ts` order) and its element count, and returns `true`. Returns `false`
/// when `ts[0]` fits one binding (the caller binds whole tensors).
fn per_chunk(
    be: &WgpuBackend,
    ts: &[&Tensor],
    mut f: impl FnMut(&[Bind<'_>], usize) -> Result<()>,
) -> Result<bool> {
    let Some(first) = ts.first() else {
        return Ok(false);
    };
    let s0 = be.storage_of(first)?;
    if s0.chunks.len() < 2 {
        return Ok(false);
    }
    let mut stores = Vec::with_capacity(ts.len());
    for t in ts {
        let s = be.storage_of(t)?;
        let same = t.shape() == first.shape()
            && t.dtype() == DType::F32
            && t.is_contiguous()
            && t.offset() == 0
            && s.chunk_bytes == s0.chunk_bytes
            && s.chunks.len() == s0.chunks.len();
        if !same {
            return Err(super::be_err(format!(
                "a {:?} {} operand spans {} buffers (binding limit) in a layout this op \
                 cannot split",
                t.shape(),
                t.dtype(),
                s.chunks.len()
            )));
        }
        stores.push(s);
    }
    let (per, total) = (s0.chunk_elems(), first.elem_count());
    for c in 0..s0.chunks.len() {
        let n = per.min(total - (c * per).min(total));
        let binds: Vec<Bind<'_>> = stores.iter().map(|s| Bind::Buf(&s.chunks[c])).collect();
        f(&binds, n)?;
    }
    Ok(true)
}

/// The buffers of device tensor `t` that hold any of the elements `span` (inclusive storage
/// element offsets, see [`view_span`]), each with its element range `lo..hi` in the storage
/// (`hi` saturated to `u32::MAX`, so a kernel's range test never excludes an element of the
/// last buffer).
fn parts<'a>(
    be: &WgpuBackend,
    t: &'a Tensor,
    span: Option<(usize, usize)>,
) -> Result<Vec<(&'a wgpu::Buffer, u32, u32)>> {
    let s = be.storage_of(t)?;
    let Some((first, last)) = span else {
        return Ok(Vec::new());
    };
    let ce = s.chunk_elems().max(1);
    let top = s.chunks.len().saturating_sub(1);
    let (c0, c1) = ((first / ce).min(top), (last / ce).min(top));
    (c0..=c1)
        .map(|c| {
            let lo = u32_of("element offset", c * ce)?;
            let hi = if c == top {
                u32::MAX
            } else {
                u32::try_from((c + 1) * ce).unwrap_or(u32::MAX)
            };
            Ok((&s.chunks[c], lo, hi))
        })
        .collect()
}

/// The buffers of a fresh contiguous output, each with the range `e0..e1` of the elements
/// it holds.
fn out_parts<'a>(
    be: &WgpuBackend,
    out: &'a Tensor,
) -> Result<Vec<(&'a wgpu::Buffer, usize, usize)>> {
    let s = be.storage_of(out)?;
    let (ce, n) = (s.chunk_elems().max(1), out.elem_count());
    Ok(s.chunks
        .iter()
        .enumerate()
        .map(|(c, b)| (b, (c * ce).min(n), ((c + 1) * ce).min(n)))
        .filter(|&(_, e0, e1)| e1 > e0)
        .collect())
}

/// The storage element offsets (inclusive) that a view with `shape`, `strides` and `off`
/// touches for its row-major elements `e0..e1`: exact bounds when the offset grows with the
/// index (no dimension steps back over its inner ones: contiguous views, row slices, repeats of
/// whole rows), the whole view's otherwise;
/// `None` for no elements.
fn view_span(
    shape: &[usize],
    strides: &[usize],
    off: usize,
    e0: usize,
    e1: usize,
) -> Option<(usize, usize)> {
    if e1 <= e0 || shape.contains(&0) {
        return None;
    }
    let mut inner = 0usize;
    let mut monotone = true;
    for (&n, &st) in shape.iter().zip(strides).rev() {
        monotone &= n <= 1 || st >= inner;
        inner += n.saturating_sub(1) * st;
    }
    let at = |e: usize| {
        let mut rem = e;
        let mut o = off;
        for (&n, &st) in shape.iter().zip(strides).rev() {
            o += (rem % n) * st;
            rem /= n;
        }
        o
    };
    if monotone {
        Some((at(e0), at(e1 - 1)))
    } else {
        Some((off, off + inner))
    }
}

/// `t` on the device, contiguous f32 (converted on the device; CPU operands uploaded), and
/// its element offset in its buffer.
fn f32_in(be: &WgpuBackend, t: &Tensor) -> Result<(Tensor, u32)> {
    let t = be.operand_as_f32(t)?;
    let off = be.binding_of(&t)?.1;
    Ok((t, off))
}

/// An optional operand as [`f32_in`] (offset 0 when absent).
fn f32_opt(be: &WgpuBackend, t: Option<&Tensor>) -> Result<(Option<Tensor>, u32)> {
    match t {
        Some(t) => {
            let (t, o) = f32_in(be, t)?;
            Ok((Some(t), o))
        }
        None => Ok((None, 0)),
    }
}

/// A 2-D f32 operand read in place when it is already an f32 view on this device (e.g. a
/// column block of a projection), else converted contiguous: the tensor, its offset and its
/// two strides.
fn f32_view2(be: &WgpuBackend, t: &Tensor) -> Result<(Tensor, u32, [u32; 2])> {
    let on_device = matches!(&**t.storage(), Storage::Device(_));
    let t = if on_device && t.dtype() == DType::F32 {
        be.storage_of(t)?;
        t.clone()
    } else {
        be.operand_as_f32(t)?
    };
    let off = be.binding_of(&t)?.1;
    let s = |i: usize| u32_of("stride", t.strides().get(i).copied().unwrap_or(0));
    let strides = [s(0)?, s(1)?];
    Ok((t, off, strides))
}

/// A size as `u32`, named in the error.
fn u32_of(what: &str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| super::be_err(format!("{what} = {v} exceeds 32 bits")))
}

/// The last dimension (an error naming `op` for a scalar).
fn last_dim(op: &'static str, x: &Tensor) -> Result<usize> {
    x.shape()
        .last()
        .copied()
        .ok_or_else(|| CoreError::shape(op, "scalar input", &[x.shape()]))
}

/// `shape` with its last dimension replaced.
fn with_last(shape: &[usize], last: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    if let Some(l) = s.last_mut() {
        *l = last;
    }
    s
}
