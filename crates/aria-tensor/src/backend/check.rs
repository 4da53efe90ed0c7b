//! The check step: every shape and dtype rule of the op set, in one place.
//!
//! [`Op::check`] runs before any backend sees an op (the `ops` functions call it first, on the
//! CPU and on a device alike), and returns what the result must be ([`OutSpec`]). A backend
//! therefore receives only well-formed ops and repeats none of these rules; its result is held
//! to the spec ([`run_checked`]). The helpers below are the rules themselves, returning the
//! sizes the kernels need, so the CPU bodies and the device backends read their dimensions from
//! the same functions that accepted the op.
//!
//! What is not checked here: facts about values (an embedding id past the vocabulary is found
//! while the rows are read) and limits of one backend (a binding size, a block length), which
//! that backend reports as [`CoreError::Backend`] or [`CoreError::Unsupported`].

use crate::backend::{AttnSpec, Backend, Op};
use crate::format::WeightFormat;
use crate::options::{FourierLayout, KeyMaskMode};
use crate::{CoreError, DType, Result, Tensor};

/// What an op's result must be: its shape and dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutSpec {
    /// The result's shape.
    pub shape: Vec<usize>,
    /// The result's dtype.
    pub dtype: DType,
}

impl OutSpec {
    fn f32(shape: Vec<usize>) -> OutSpec {
        OutSpec {
            shape,
            dtype: DType::F32,
        }
    }
}

/// Run a checked op on a backend and hold the result to the check step's [`OutSpec`]: a
/// backend that returns another shape or dtype is an error naming the op and both shapes.
pub fn run_checked(be: &dyn Backend, op: Op, spec: &OutSpec) -> Result<Tensor> {
    let name = op.name();
    let out = be.run(op)?;
    held_to(be.name(), name, out, spec)
}

/// `out` when it has the shape and dtype `spec` promises; otherwise an error naming the
/// backend, the op and both shapes.
pub fn held_to(backend: &str, op: &'static str, out: Tensor, spec: &OutSpec) -> Result<Tensor> {
    if out.shape() != spec.shape.as_slice() || out.dtype() != spec.dtype {
        return Err(CoreError::Backend {
            backend: backend.to_string(),
            reason: format!(
                "{op} returned {:?} {} where the op set promises {:?} {}",
                out.shape(),
                out.dtype(),
                spec.shape,
                spec.dtype
            ),
        });
    }
    Ok(out)
}

/// `Ok` when `t` holds floats (f32, f16 or bf16); otherwise a dtype error naming `op`.
pub fn require_float(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(CoreError::DType {
            op,
            dtype: t.dtype(),
            reason: "a float tensor is required".into(),
        })
    }
}

/// `[B, N, E]` of a 3-D tensor.
pub fn dims3(op: &'static str, what: &str, t: &Tensor) -> Result<[usize; 3]> {
    match t.shape() {
        &[a, b, c] => Ok([a, b, c]),
        s => Err(CoreError::shape(op, format!("{what} must be 3-D"), &[s])),
    }
}

/// A per-row mask must be `[b, n]`.
pub fn row_mask(op: &'static str, m: Option<&Tensor>, b: usize, n: usize) -> Result<()> {
    match m {
        Some(m) if m.shape() != [b, n] => Err(CoreError::shape(
            op,
            format!("row mask must be [{b}, {n}]"),
            &[m.shape()],
        )),
        _ => Ok(()),
    }
}

/// A per-batch vector must be `[b, e]`.
pub fn per_batch(op: &'static str, what: &str, t: &Tensor, b: usize, e: usize) -> Result<()> {
    if t.shape() != [b, e] {
        return Err(CoreError::shape(
            op,
            format!("{what} must be [{b}, {e}]"),
            &[t.shape()],
        ));
    }
    Ok(())
}

/// The last dimension of `x`, with a weight (when given) of as many elements.
pub fn norm_width(op: &'static str, x: &Tensor, w: Option<&Tensor>) -> Result<usize> {
    let d = *x
        .shape()
        .last()
        .ok_or_else(|| CoreError::shape(op, "scalar input", &[x.shape()]))?;
    if let Some(w) = w {
        if w.elem_count() != d {
            return Err(CoreError::shape(
                op,
                "weight must match the last dim",
                &[x.shape(), w.shape()],
            ));
        }
    }
    Ok(d)
}

/// `(M, K, N)` of a linear call (`x [.., K]`, `w [N, K]`, `b [N]`), `M` the product of `x`'s
/// leading dimensions.
pub fn linear_dims(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<(usize, usize, usize)> {
    let (xs, ws) = (x.shape(), w.shape());
    let k = *xs
        .last()
        .ok_or_else(|| CoreError::shape("linear", "x is a scalar", &[xs, ws]))?;
    if ws.len() != 2 || ws[1] != k {
        return Err(CoreError::shape(
            "linear",
            "w must be [N, K] with K = x's last dim",
            &[xs, ws],
        ));
    }
    let n = ws[0];
    if let Some(b) = b {
        if b.shape() != [n] {
            return Err(CoreError::shape(
                "linear",
                "bias must be [N]",
                &[xs, ws, b.shape()],
            ));
        }
    }
    Ok((xs[..xs.len() - 1].iter().product(), k, n))
}

/// `(batch, M, K, N)` of a batched matrix product `[.., M, K]·[.., K, N]`.
pub fn matmul_dims(a: &Tensor, b: &Tensor) -> Result<(usize, usize, usize, usize)> {
    let (as_, bs) = (a.shape(), b.shape());
    if as_.len() < 2 || bs.len() != as_.len() || as_[..as_.len() - 2] != bs[..bs.len() - 2] {
        return Err(CoreError::shape(
            "matmul",
            "need [.., M, K] and [.., K, N]",
            &[as_, bs],
        ));
    }
    let r = as_.len();
    let (m, k, n) = (as_[r - 2], as_[r - 1], bs[r - 1]);
    if bs[r - 2] != k {
        return Err(CoreError::shape(
            "matmul",
            "inner dimensions differ",
            &[as_, bs],
        ));
    }
    Ok((as_[..r - 2].iter().product(), m, k, n))
}

/// The sizes of a 1-D convolution (`aria_core::ops::conv1d`), the padding included: `x [b,
/// cin, l]`, `w [cout, cin, k]`, `padding` zeros each side, `lo` output positions (the CPU
/// body's own, `aria_cpu::products::ConvDims`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvDims {
    /// Batch items.
    pub b: usize,
    /// Input channels.
    pub cin: usize,
    /// Input length.
    pub l: usize,
    /// Output channels.
    pub cout: usize,
    /// Kernel width.
    pub k: usize,
    /// Output length.
    pub lo: usize,
    /// Zeros on each side.
    pub padding: usize,
}

/// The element strides of an operand of `shape` read at the positions of the broadcast `out`
/// shape (0 along broadcast dimensions), for backends that index broadcast operands.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let r = out.len();
    let mut cs = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        cs[i] = cs[i + 1] * shape[i + 1];
    }
    (0..r)
        .map(|i| {
            if i + shape.len() < r {
                0
            } else {
                let j = i + shape.len() - r;
                if shape[j] == 1 {
                    0
                } else {
                    cs[j]
                }
            }
        })
        .collect()
}

/// Check `x [B, Cin, L]`, `w [Cout, Cin, K]`, `b [Cout]` with `padding` zeros on each side.
pub fn conv1d_dims(x: &Tensor, w: &Tensor, b: Option<&Tensor>, padding: usize) -> Result<ConvDims> {
    let (xs, ws) = (x.shape(), w.shape());
    if xs.len() != 3 || ws.len() != 3 || ws[1] != xs[1] {
        return Err(CoreError::shape(
            "conv1d",
            "need x [B, Cin, L] and w [Cout, Cin, K]",
            &[xs, ws],
        ));
    }
    let (bn, cin, l) = (xs[0], xs[1], xs[2]);
    let (cout, k) = (ws[0], ws[2]);
    if let Some(b) = b {
        if b.shape() != [cout] {
            return Err(CoreError::shape(
                "conv1d",
                "bias must be [Cout]",
                &[xs, ws, b.shape()],
            ));
        }
    }
    if l + 2 * padding < k || k == 0 {
        return Err(CoreError::shape(
            "conv1d",
            "input shorter than the kernel",
            &[xs, ws],
        ));
    }
    Ok(ConvDims {
        b: bn,
        cin,
        l,
        cout,
        k,
        lo: l + 2 * padding - k + 1,
        padding,
    })
}

/// The sizes of an attention call: `q [B, H, Nq, D]`, `k [B, H, Nk, D]`, `v [B, H, Nk, Dv]`
/// (the CPU body's own, `aria_cpu::attention::Dims`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnDims {
    /// Batch items.
    pub b: usize,
    /// Heads.
    pub h: usize,
    /// Queries.
    pub nq: usize,
    /// Keys.
    pub nk: usize,
    /// Query/key head dimension.
    pub d: usize,
    /// Value head dimension.
    pub dv: usize,
}

/// Check `q`, `k`, `v`, the differential halves, the key mask and the window.
pub fn attention_dims(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    diff: Option<(&Tensor, &Tensor)>,
    key_mask: Option<&Tensor>,
    window: Option<(usize, usize)>,
) -> Result<AttnDims> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if let Some((q2, k2)) = diff {
        if q2.shape() != qs || k2.shape() != ks {
            return Err(CoreError::shape(
                "attention_diff",
                "q2 must match q and k2 must match k",
                &[qs, q2.shape(), ks, k2.shape()],
            ));
        }
    }
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 {
        return Err(CoreError::shape(
            "attention",
            "q, k, v must be 4-D [B, H, N, D]",
            &[qs, ks, vs],
        ));
    }
    let (b, h, nq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (nk, dv) = (ks[2], vs[3]);
    if ks[0] != b || ks[1] != h || ks[3] != d || vs[0] != b || vs[1] != h || vs[2] != nk {
        return Err(CoreError::shape(
            "attention",
            "q, k, v disagree",
            &[qs, ks, vs],
        ));
    }
    if let Some(m) = key_mask {
        if m.shape() != [b, nk] {
            return Err(CoreError::shape(
                "attention",
                "key_mask must be [B, Nk]",
                &[qs, ks, m.shape()],
            ));
        }
    }
    if window.is_some() && nq != nk {
        return Err(CoreError::shape(
            "attention",
            "a window needs Nq == Nk",
            &[qs, ks],
        ));
    }
    Ok(AttnDims {
        b,
        h,
        nq,
        nk,
        d,
        dv,
    })
}

/// The rotated width `R` of rope tables `cos, sin [≥ n, R]` (`R` even, at most `d`).
pub fn rope_width(
    op: &'static str,
    why: &'static str,
    shapes: &[&[usize]],
    n: usize,
    d: usize,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<usize> {
    let cs = cos.shape();
    if cs.len() != 2 || cs[0] < n || cs[1] > d || !cs[1].is_multiple_of(2) || sin.shape() != cs {
        let mut all: Vec<&[usize]> = shapes.to_vec();
        all.extend([cs, sin.shape()]);
        return Err(CoreError::shape(op, why, &all));
    }
    Ok(cs[1])
}

/// NumPy broadcasting of two shapes.
pub fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let r = a.len().max(b.len());
    let mut out = vec![0; r];
    for (i, o) in out.iter_mut().enumerate() {
        let da = if i + a.len() >= r {
            a[i + a.len() - r]
        } else {
            1
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r]
        } else {
            1
        };
        *o = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(CoreError::shape(op, "shapes do not broadcast", &[a, b]));
        };
    }
    Ok(out)
}

/// `(B, N, Dh)` of `qkv_heads` (`aria_core::ops::qkv_heads`): `x [B, N, parts·H·Dh]` with `part < parts`.
pub fn qkv_dims(
    x: &Tensor,
    parts: usize,
    part: usize,
    heads: usize,
    rope: Option<&Tensor>,
) -> Result<(usize, usize, usize)> {
    let s = x.shape();
    if s.len() != 3
        || parts == 0
        || heads == 0
        || part >= parts
        || !s[2].is_multiple_of(parts * heads)
    {
        let mut shapes = vec![s];
        if let Some(c) = rope {
            shapes.push(c.shape());
        }
        return Err(CoreError::shape(
            "qkv_heads",
            "x must be [B, N, parts·H·Dh] with part < parts",
            &shapes,
        ));
    }
    Ok((s[0], s[1], s[2] / (parts * heads)))
}

/// The last two dimensions `(N, D)` of `x [.., N, D]`.
fn last2(op: &'static str, why: &'static str, x: &Tensor) -> Result<(usize, usize)> {
    let s = x.shape();
    if s.len() < 2 {
        return Err(CoreError::shape(op, why, &[s]));
    }
    Ok((s[s.len() - 2], s[s.len() - 1]))
}

fn with_last(shape: &[usize], v: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    if let Some(l) = s.last_mut() {
        *l = v;
    }
    s
}

fn check_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    diff: Option<(&Tensor, &Tensor)>,
    opts: &AttnSpec,
) -> Result<OutSpec> {
    let d = attention_dims(q, k, v, diff, opts.key_mask.as_ref(), opts.window)?;
    Ok(OutSpec::f32(vec![d.b, d.h, d.nq, d.dv]))
}

fn check_torch_attention(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnSpec) -> Result<OutSpec> {
    const OP: &str = "torch_bf16::attention";
    if opts.softcap.is_some() {
        return Err(CoreError::Invalid(
            "torch_bf16::attention: the flash-attention kernel has no logit soft-cap".into(),
        ));
    }
    flash_dims(q, k, v)?;
    let (s, ks) = (q.shape(), k.shape());
    if let Some(m) = &opts.key_mask {
        if m.shape() != [s[0], ks[2]] {
            return Err(CoreError::shape(
                OP,
                "key mask must be [B, Nk]",
                &[s, ks, m.shape()],
            ));
        }
        if opts.mask_mode != KeyMaskMode::Exclude {
            return Err(CoreError::Invalid(
                "torch_bf16::attention: only excluded keys (KeyMaskMode::Exclude) are \
                 reproduced"
                    .into(),
            ));
        }
    }
    Ok(OutSpec::f32(s.to_vec()))
}

/// The rules of PyTorch's CPU flash attention as `aria_core::ops::torch_bf16` replays it: `q [B,
/// H, N, D]`, `k, v [B, H, M, D]`, the `M` keys within one block.
pub fn flash_dims(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<()> {
    let (s, ks) = (q.shape(), k.shape());
    if s.len() != 4 || ks.len() != 4 || v.shape() != ks || ks[..2] != s[..2] || ks[3] != s[3] {
        return Err(CoreError::shape(
            "torch_bf16::flash_attention",
            "need q [B, H, N, D] and k, v [B, H, M, D]",
            &[s, ks, v.shape()],
        ));
    }
    let kn = ks[2];
    let block = FLASH_KV_BLOCK;
    if kn > block {
        return Err(CoreError::Invalid(format!(
            "torch_bf16::flash_attention: {kn} keys exceed one {block}-key block"
        )));
    }
    Ok(())
}

impl Op {
    /// The check step: every shape and dtype rule of this op, and what its result must be.
    /// Runs before any backend sees the op.
    pub fn check(&self) -> Result<OutSpec> {
        let same = |x: &Tensor| Ok(OutSpec::f32(x.shape().to_vec()));
        match self {
            Op::Linear { x, w, b, prepared } => {
                require_float("linear", x)?;
                require_float("linear", w)?;
                let (_, _, n) = linear_dims(x, w, b.as_ref())?;
                if let Some(p) = prepared {
                    if p.shape()[..] != *w.shape() {
                        return Err(CoreError::shape(
                            "linear",
                            format!("a layout prepared by {} for another weight", p.backend()),
                            &[&p.shape(), w.shape()],
                        ));
                    }
                }
                Ok(OutSpec::f32(with_last(x.shape(), n)))
            }
            Op::LinearPacked {
                x,
                format,
                w8a8,
                shape,
                b,
                ..
            } => Ok(OutSpec::f32(linear_packed_shape(
                x,
                *format,
                *w8a8,
                *shape,
                b.as_ref(),
            )?)),
            Op::Matmul { a, b } => {
                let (_, _, _, n) = matmul_dims(a, b)?;
                Ok(OutSpec::f32(with_last(a.shape(), n)))
            }
            Op::Conv1d { x, w, b, padding } => {
                let d = conv1d_dims(x, w, b.as_ref(), *padding)?;
                Ok(OutSpec::f32(vec![d.b, d.cout, d.lo]))
            }
            Op::Attention {
                q,
                k,
                v,
                diff,
                opts,
            } => check_attention(q, k, v, diff.as_ref().map(|(a, b)| (a, b)), opts),
            Op::Unary { x, .. }
            | Op::Affine { x, .. }
            | Op::MulScalar { x, .. }
            | Op::AddScalar { x, .. }
            | Op::TorchBf16GeluTanh { x }
            | Op::TorchBf16Round { x } => same(x),
            Op::Binary { a, b, f } => Ok(OutSpec::f32(broadcast_shape(
                binary_name(*f),
                a.shape(),
                b.shape(),
            )?)),
            Op::TorchBf16Binary { a, b, f } => Ok(OutSpec::f32(broadcast_shape(
                torch_binary_name(*f),
                a.shape(),
                b.shape(),
            )?)),
            Op::Glu { x, .. } => {
                let s = x.shape();
                let d2 = *s
                    .last()
                    .ok_or_else(|| CoreError::shape("glu", "scalar input", &[s]))?;
                if d2 % 2 != 0 {
                    return Err(CoreError::shape("glu", "last dim must be even", &[s]));
                }
                Ok(OutSpec::f32(with_last(s, d2 / 2)))
            }
            Op::Softmax { x } => {
                norm_width("softmax", x, None)?;
                same(x)
            }
            Op::Embedding { ids, table } => {
                let ts = table.shape();
                if ts.len() != 2 {
                    return Err(CoreError::shape(
                        "embedding",
                        "table must be [V, D]",
                        &[ids.shape(), ts],
                    ));
                }
                require_float("embedding", table)?;
                let mut shape = ids.shape().to_vec();
                shape.push(ts[1]);
                Ok(OutSpec::f32(shape))
            }
            Op::Rope { x, cos, sin } => {
                let (n, d) = last2("rope", "x must be [.., N, D]", x)?;
                rope_width(
                    "rope",
                    "tables must be [>=N, R] with R even, R <= D",
                    &[x.shape()],
                    n,
                    d,
                    cos,
                    sin,
                )?;
                same(x)
            }
            Op::RmsNorm { x, w, .. } => {
                norm_width("rms_norm", x, w.as_ref())?;
                same(x)
            }
            Op::LayerNorm { x, w, b, .. } => {
                norm_width("layer_norm", x, w.as_ref())?;
                norm_width("layer_norm", x, b.as_ref())?;
                same(x)
            }
            Op::Dyt { x, gamma, beta, .. } => {
                norm_width("dyt", x, Some(gamma))?;
                norm_width("dyt", x, Some(beta))?;
                same(x)
            }
            Op::Unfold { x, k } => {
                let s = x.shape();
                if s.len() != 3 || k.is_multiple_of(2) {
                    return Err(CoreError::shape(
                        "unfold",
                        format!("need x [B, L, C] and an odd window (got {k})"),
                        &[s],
                    ));
                }
                Ok(OutSpec::f32(vec![s[0], s[1], k * s[2]]))
            }
            Op::Contiguous { x } => Ok(OutSpec {
                shape: x.shape().to_vec(),
                dtype: x.dtype(),
            }),
            Op::ToDtype { x, dtype } => Ok(OutSpec {
                shape: x.shape().to_vec(),
                dtype: *dtype,
            }),
            Op::Cat { xs, dim } => {
                let refs: Vec<&Tensor> = xs.iter().collect();
                cat_spec(&refs, *dim)
            }
            Op::RmsNormModulate {
                x,
                gamma,
                scale_shift,
                ..
            } => {
                const OP: &str = "rms_norm_modulate";
                let [b, _, e] = dims3(OP, "x", x)?;
                if gamma.elem_count() != e {
                    return Err(CoreError::shape(
                        OP,
                        "gamma must match the last dim",
                        &[x.shape(), gamma.shape()],
                    ));
                }
                if let Some((sc, sh)) = scale_shift {
                    per_batch(OP, "scale", sc, b, e)?;
                    per_batch(OP, "shift", sh, b, e)?;
                }
                same(x)
            }
            Op::GatedResidualAdd {
                h,
                u,
                gate,
                row_mask: m,
            } => {
                const OP: &str = "gated_residual_add";
                let [b, n, e] = dims3(OP, "h", h)?;
                let [ub, nu, ue] = dims3(OP, "u", u)?;
                if ub != b || ue != e || nu > n {
                    return Err(CoreError::shape(
                        OP,
                        "u must be [B, Nu <= N, E]",
                        &[h.shape(), u.shape()],
                    ));
                }
                if let Some(g) = gate {
                    per_batch(OP, "gate", g, b, e)?;
                }
                row_mask(OP, m.as_ref(), b, n)?;
                same(h)
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
                let [b, n, w] = dims3(OP, "x", x)?;
                let d = *head_dim;
                if col + heads * d > w {
                    return Err(CoreError::shape(
                        OP,
                        format!(
                            "columns {col}..{} of a width-{w} projection",
                            col + heads * d
                        ),
                        &[x.shape()],
                    ));
                }
                if let Some((g, _)) = norm {
                    if g.elem_count() != d {
                        return Err(CoreError::shape(
                            OP,
                            format!("norm gain must have head_dim = {d} elements"),
                            &[g.shape()],
                        ));
                    }
                }
                if let Some((c, s)) = rope {
                    rope_width(
                        OP,
                        "rope tables must be [>=N, R] with R even, R <= head_dim",
                        &[x.shape()],
                        n,
                        d,
                        c,
                        s,
                    )?;
                }
                Ok(OutSpec::f32(vec![b, *heads, n, d]))
            }
            Op::MergeHeads { x, row_mask: m } => {
                const OP: &str = "merge_heads";
                let &[b, h, n, d] = x.shape() else {
                    return Err(CoreError::shape(OP, "x must be [B, H, N, D]", &[x.shape()]));
                };
                row_mask(OP, m.as_ref(), b, n)?;
                Ok(OutSpec::f32(vec![b, n, h * d]))
            }
            Op::Axpby { a, x, b, y } => {
                let items = x.shape().first().copied().unwrap_or(1);
                if x.shape() != y.shape() || a.len() != items || b.len() != items {
                    return Err(CoreError::shape(
                        "axpby",
                        format!(
                            "x and y must match, with {} and {} coefficients for {items} items",
                            a.len(),
                            b.len()
                        ),
                        &[x.shape(), y.shape()],
                    ));
                }
                same(x)
            }
            Op::ApgGuidance {
                x,
                v_cond,
                v_uncond,
                sigma,
                mask,
                ..
            } => {
                const OP: &str = "apg_guidance";
                let [b, _, t] = dims3(OP, "x", x)?;
                if v_cond.shape() != x.shape() || v_uncond.shape() != x.shape() || sigma.len() != b
                {
                    return Err(CoreError::shape(
                        OP,
                        format!(
                            "x, v_cond, v_uncond must match, with {b} sigmas (got {})",
                            sigma.len()
                        ),
                        &[x.shape(), v_cond.shape(), v_uncond.shape()],
                    ));
                }
                row_mask(OP, mask.as_ref(), b, t)?;
                same(x)
            }
            Op::CfgRescale { v, v_cond, .. } => {
                dims3("cfg_rescale", "v", v)?;
                if v_cond.shape() != v.shape() {
                    return Err(CoreError::shape(
                        "cfg_rescale",
                        "v and v_cond must match",
                        &[v.shape(), v_cond.shape()],
                    ));
                }
                same(v)
            }
            Op::Pad {
                x,
                dim,
                before,
                after,
            } => {
                let s = x.shape();
                if *dim >= s.len() {
                    return Err(CoreError::shape(
                        "pad",
                        format!("dimension {dim} of a rank-{} tensor", s.len()),
                        &[s],
                    ));
                }
                let mut shape = s.to_vec();
                shape[*dim] += before + after;
                Ok(OutSpec {
                    shape,
                    dtype: x.dtype(),
                })
            }
            Op::RopeTable { inv_freq, n, .. } => {
                if inv_freq.rank() != 1 {
                    return Err(CoreError::shape(
                        "rope_table",
                        "inv_freq must be [F]",
                        &[inv_freq.shape()],
                    ));
                }
                Ok(OutSpec::f32(vec![2, *n, 2 * inv_freq.elem_count()]))
            }
            Op::QkvHeads {
                x,
                parts,
                part,
                heads,
                norm,
                rope,
                ..
            } => {
                let (b, n, dh) = qkv_dims(x, *parts, *part, *heads, rope.as_ref().map(|r| &r.0))?;
                if let Some((g, be)) = norm {
                    if g.elem_count() != dh || be.elem_count() != dh {
                        return Err(CoreError::shape(
                            "qkv_heads",
                            "norm gamma and beta must be [Dh]",
                            &[x.shape(), g.shape(), be.shape()],
                        ));
                    }
                }
                if let Some((c, s)) = rope {
                    rope_width(
                        "qkv_heads",
                        "cos and sin must be [>=N, R] with R even and R <= Dh",
                        &[x.shape()],
                        n,
                        dh,
                        c,
                        s,
                    )?;
                }
                Ok(OutSpec::f32(vec![b, *heads, n, dh]))
            }
            Op::StdLast { x } => {
                let s = x.shape();
                if s.is_empty() {
                    return Err(CoreError::shape("std_last", "scalar input", &[s]));
                }
                let shape = with_last(s, 1);
                if s.last() == Some(&0) && shape.iter().product::<usize>() > 0 {
                    // No value for a row of nothing.
                    return Err(CoreError::shape("std_last", "rows of zero elements", &[s]));
                }
                Ok(OutSpec::f32(shape))
            }
            Op::FourierFeatures {
                values,
                freqs,
                layout,
            } => {
                if values.rank() != 1 || freqs.rank() != 1 {
                    return Err(CoreError::shape(
                        "fourier_features",
                        "values and freqs must be [N] and [F]",
                        &[values.shape(), freqs.shape()],
                    ));
                }
                let f = freqs.elem_count();
                let dim = match layout {
                    FourierLayout::CosSin => 2 * f,
                    FourierLayout::ValueSinCos => 2 * f + 1,
                };
                Ok(OutSpec::f32(vec![values.elem_count(), dim]))
            }
            Op::FillMaskedRows { x, mask, fill } => {
                let s = x.shape();
                let d = s.last().copied().unwrap_or(0);
                if s.is_empty()
                    || mask.shape() != &s[..s.len() - 1]
                    || fill.as_ref().is_some_and(|f| f.shape() != [d])
                {
                    return Err(CoreError::shape(
                        "fill_masked_rows",
                        "need x [.., L, D], mask [.., L] and fill [D]",
                        &[
                            s,
                            mask.shape(),
                            fill.as_ref().map_or(&[][..], |f| f.shape()),
                        ],
                    ));
                }
                same(x)
            }
            Op::TorchBf16Linear { x, w, b } => {
                require_float("torch_bf16::linear", x)?;
                require_float("torch_bf16::linear", w)?;
                let (_, _, n) = linear_dims(x, w, b.as_ref())?;
                Ok(OutSpec::f32(with_last(x.shape(), n)))
            }
            Op::TorchBf16Attention { q, k, v, opts } => check_torch_attention(q, k, v, opts),
            Op::TorchBf16RmsNorm { x, w, .. } => {
                let d = x.shape().last().copied().unwrap_or(0);
                if x.rank() == 0 || w.elem_count() != d {
                    return Err(CoreError::shape(
                        "torch_bf16::rms_norm",
                        "weight must match the last dim",
                        &[x.shape(), w.shape()],
                    ));
                }
                same(x)
            }
            Op::TorchBf16Rope { x, cos, sin } => {
                let s = x.shape();
                let cs = cos.shape();
                if s.len() < 2
                    || cs.len() != 2
                    || cs[0] < s[s.len() - 2]
                    || cs[1] != s[s.len() - 1]
                    || !cs[1].is_multiple_of(2)
                    || sin.shape() != cs
                {
                    return Err(CoreError::shape(
                        "torch_bf16::rope",
                        "x must be [.., N, D] with D even and the tables [>=N, D]",
                        &[s, cs, sin.shape()],
                    ));
                }
                same(x)
            }
        }
    }
}

/// The result of concatenating `tensors` along `dim` (equal ranks, dtypes and other sizes).
pub fn cat_spec(tensors: &[&Tensor], dim: usize) -> Result<OutSpec> {
    let first = tensors
        .first()
        .ok_or_else(|| CoreError::Invalid("cat: no tensors".into()))?;
    let shapes: Vec<&[usize]> = tensors.iter().map(|t| t.shape()).collect();
    if dim >= first.rank() {
        return Err(CoreError::shape("cat", format!("dim {dim}"), &shapes));
    }
    for t in tensors {
        let ok = t.rank() == first.rank()
            && t.dtype() == first.dtype()
            && t.shape()
                .iter()
                .zip(first.shape())
                .enumerate()
                .all(|(i, (a, b))| i == dim || a == b);
        if !ok {
            return Err(CoreError::shape("cat", "shapes or dtypes differ", &shapes));
        }
    }
    let mut shape = first.shape().to_vec();
    shape[dim] = tensors.iter().map(|t| t.shape()[dim]).sum();
    Ok(OutSpec {
        shape,
        dtype: first.dtype(),
    })
}

fn binary_name(f: super::BinaryOp) -> &'static str {
    use super::BinaryOp as B;
    match f {
        B::Add => "add",
        B::Sub => "sub",
        B::Mul => "mul",
        B::Div => "div",
    }
}

fn torch_binary_name(f: super::BinaryOp) -> &'static str {
    use super::BinaryOp as B;
    match f {
        B::Add => "torch_bf16::add",
        B::Sub => "torch_bf16::sub",
        B::Mul => "torch_bf16::mul",
        B::Div => "torch_bf16::div",
    }
}

/// Keys one block of PyTorch's CPU flash attention holds: the longest key sequence the bf16
/// replay (`torch_bf16_attention`) runs.
pub const FLASH_KV_BLOCK: usize = 512;

/// Check a `linear_packed` call (`aria_core::ops::linear_packed`) before any backend sees it: `x [.., cols]`, a weight
/// `[rows, cols]` (each row a whole number of the format's blocks, the last one zero-padded),
/// W8A8 only on `q8_0`, `b [rows]`. Returns the output shape `[.., rows]`.
pub fn linear_packed_shape(
    x: &Tensor,
    format: WeightFormat,
    w8a8: bool,
    [rows, cols]: [usize; 2],
    b: Option<&Tensor>,
) -> Result<Vec<usize>> {
    const OP: &str = "linear_packed";
    let xs = x.shape();
    if xs.last() != Some(&cols) {
        return Err(CoreError::shape(
            OP,
            "x's last dimension must equal the weight's input width",
            &[xs, &[rows, cols]],
        ));
    }
    if x.dtype() != DType::F32 {
        return Err(CoreError::DType {
            op: OP,
            dtype: x.dtype(),
            reason: "activations must be f32".into(),
        });
    }
    if w8a8 && format != WeightFormat::Q8_0 {
        return Err(CoreError::Invalid(format!(
            "{OP}: W8A8 needs q8_0 weights, not {format}"
        )));
    }
    if let Some(b) = b {
        if b.shape() != [rows] {
            return Err(CoreError::shape(
                OP,
                "bias must be [rows]",
                &[xs, &[rows, cols], b.shape()],
            ));
        }
    }
    let mut out = xs.to_vec();
    if let Some(l) = out.last_mut() {
        *l = rows;
    }
    Ok(out)
}
