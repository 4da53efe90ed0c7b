use rayon::prelude::*;

use super::{f32_data, route};
use crate::backend::{AttnSpec, Op};
use crate::cpu::gemm::{small, BSrc, Packed, WData};
use crate::cpu::{self, rows, Isa};
use crate::{threads, CoreError, Result, Tensor};

/// Query rows per task: keys and values are packed once per task.
const QB: usize = 64;

/// How a key mask is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyMaskMode {
    /// The official CPU semantics (PyTorch SDPA after `v ← v ⊙ mask`): masked keys keep their
    /// weight in the softmax denominator but contribute zero values.
    #[default]
    ZeroValues,
    /// True masking: masked keys are excluded from the softmax. A query with no valid key
    /// outputs zeros.
    Exclude,
}

/// Options of [`attention`].
#[derive(Debug, Clone, Copy)]
pub struct AttnOpts<'a> {
    /// Multiplier of `q·k` (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Logit soft-capping `c·tanh(s/c)` applied after scaling.
    pub softcap: Option<f32>,
    /// Key validity mask `[B, Nk]` (any dtype; non-zero = valid).
    pub key_mask: Option<&'a Tensor>,
    /// How `key_mask` is applied.
    pub mask_mode: KeyMaskMode,
    /// Band: query `i` sees keys `j` with `i - left <= j <= i + right` (self-attention).
    pub window: Option<(usize, usize)>,
    /// The two products may round `q`, `k`, the probabilities and `v` to bf16 (f32
    /// accumulation; scaling, masking and the softmax stay f32). A permission, not an order: a
    /// backend takes it where it has a faster unit for bf16 products (the CPU: the AMX tile
    /// unit, see [`attention_amx`]) and computes in f32 elsewhere. Models set it for a bf16
    /// precision mode; they never ask which unit runs it.
    pub bf16_products: bool,
}

impl<'a> AttnOpts<'a> {
    /// Plain attention with the given scale.
    pub fn new(scale: f32) -> Self {
        AttnOpts {
            scale,
            softcap: None,
            key_mask: None,
            mask_mode: KeyMaskMode::ZeroValues,
            window: None,
            bf16_products: false,
        }
    }
}

/// Fused scaled-dot-product attention.
///
/// `q [B, H, Nq, D]`, `k [B, H, Nk, D]`, `v [B, H, Nk, Dv]` (f32; any strides, so head-split views
/// of `[B, N, H, D]` projections can be passed without copying) → `[B, H, Nq, Dv]` contiguous.
/// Softmax is computed in f32 with the maximum subtracted.
///
/// On the CPU, queries are processed in tiles; each tile computes its full row of scores (only
/// the keys its rows can see: with a `window` the work is O(N · band), never O(N²)), an exact
/// max-subtracted softmax, and `P·V`, all with the packed matrix micro-kernels.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    route!(
        "attention",
        [q, k, v, opts.key_mask],
        Op::Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            diff: None,
            opts: AttnSpec::of(opts)
        }
    );
    // The CPU takes the bf16 permission on the AMX tile unit only (elsewhere f32 is as fast).
    #[cfg(target_arch = "x86_64")]
    if opts.bf16_products && cpu::current() == cpu::Isa::Avx512 && cpu::bf16dot::use_tiles() {
        return attention_amx(q, k, v, opts);
    }
    attention_impl(q, k, None, v, opts)
}

/// Differential attention `Attn(q, k, v) − Attn(q2, k2, v)` (same `v`, same options for both
/// halves), fused: the two probability rows are subtracted before one product with `v`.
///
/// Shapes as in [`attention`]; `q2` must match `q` and `k2` must match `k`.
pub fn attention_diff(
    q: &Tensor,
    k: &Tensor,
    q2: &Tensor,
    k2: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    route!(
        "attention",
        [q, k, q2, k2, v, opts.key_mask],
        Op::Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            diff: Some((q2.clone(), k2.clone())),
            opts: AttnSpec::of(opts)
        }
    );
    attention_impl(q, k, Some((q2, k2)), v, opts)
}

/// [`attention`] with its two products on the AMX tile unit (x86-64 CPUs with AMX-BF16 and
/// AVX-512 BF16, on Linux): `q`, `k`, the probabilities and `v` rounded to bf16 (nearest even),
/// f32 accumulation, scaling, soft-capping, masking and the softmax in f32 as in [`attention`].
/// Each output is one accumulation in one tile register on one thread, so neither the blocking
/// nor the thread count changes a bit; the unit's rounding inside a `tdpbf16ps` is its own.
/// A window is applied to the scores (the whole score row is computed).
///
/// CPU tensors only; an error names what is missing where the unit is not there.
pub fn attention_amx(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    for t in [q, k, v] {
        if let crate::Device::Backend(be) = t.device() {
            return Err(CoreError::Unsupported {
                op: "attention (AMX)",
                backend: be.name().to_string(),
            });
        }
    }
    let (dims, mask) = dims_and_mask(q, k, v, opts)?;
    #[cfg(target_arch = "x86_64")]
    if cpu::bf16dot::amx_available() && cpu::bf16dot::native() {
        return attention_amx_heads(q, k, v, opts, dims, mask);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (dims, mask);
    Err(CoreError::Unsupported {
        op: "attention (AMX)",
        backend: "cpu (no AMX-BF16 tile unit with AVX-512 BF16 granted)".into(),
    })
}

/// [`attention_amx`] once checked: every (batch, head) on a thread of the pool, its buffers
/// reused from head to head.
#[cfg(target_arch = "x86_64")]
fn attention_amx_heads(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
    Dims {
        b,
        h,
        nq,
        nk,
        d,
        dv,
    }: Dims,
    mask: Option<Vec<bool>>,
) -> Result<Tensor> {
    let isa = cpu::current();
    let (qc, kc, vc) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let (qd, kd, vd) = (f32_data(&qc)?, f32_data(&kc)?, f32_data(&vc)?);
    let mut out = vec![0f32; b * h * nq * dv];
    if dv == 0 || nq == 0 || nk == 0 {
        return Tensor::from_vec(out, &[b, h, nq, dv]);
    }
    threads::install(|| {
        out.par_chunks_mut(nq * dv)
            .enumerate()
            .for_each(|(bh, ob)| {
                let ctx = RowCtx {
                    isa,
                    opts,
                    mask: mask.as_ref().map(|m| &m[(bh / h) * nk..(bh / h + 1) * nk]),
                    nk,
                };
                cpu::amx_attn::with_thread_buffers(|buf| {
                    cpu::amx_attn::head(
                        buf,
                        &qd[bh * nq * d..(bh + 1) * nq * d],
                        &kd[bh * nk * d..(bh + 1) * nk * d],
                        &vd[bh * nk * dv..(bh + 1) * nk * dv],
                        (nq, nk, d, dv),
                        |i, row| ctx.probs(i, 0, row),
                        ob,
                    )
                });
            });
    });
    Tensor::from_vec(out, &[b, h, nq, dv])
}

/// Everything a query tile needs to turn scores into probabilities.
struct RowCtx<'a> {
    isa: Isa,
    opts: &'a AttnOpts<'a>,
    /// Key validity of this batch item (`None`: all valid).
    mask: Option<&'a [bool]>,
    nk: usize,
}

impl RowCtx<'_> {
    /// Turn the raw `q·k` row `s` (keys `j0..j0 + s.len()`) of query `i` into probabilities.
    fn probs(&self, i: usize, j0: usize, s: &mut [f32]) {
        let o = self.opts;
        let (lo, hi) = match o.window {
            Some((l, r)) => (i.saturating_sub(l), (i + r + 1).min(self.nk)),
            None => (0, self.nk),
        };
        // Only the keys the query sees enter the reductions, starting at its first key: a row's
        // bits then never depend on where the tile around it starts (windowed decoding of a
        // banded model relies on this).
        let a = lo.saturating_sub(j0).min(s.len());
        let b = hi.saturating_sub(j0).clamp(a, s.len());
        s[..a].fill(0.0);
        s[b..].fill(0.0);
        let (j0, s) = (j0 + a, &mut s[a..b]);
        rows::scale(self.isa, s, o.scale);
        if let Some(cap) = o.softcap {
            rows::softcap(self.isa, s, cap);
        }
        if let (KeyMaskMode::Exclude, Some(m)) = (o.mask_mode, self.mask) {
            for (e, &valid) in s.iter_mut().zip(&m[j0..]) {
                if !valid {
                    *e = f32::NEG_INFINITY;
                }
            }
        }
        let mx = rows::max(self.isa, s);
        if mx == f32::NEG_INFINITY {
            s.fill(0.0);
            return;
        }
        let den = rows::exp_sub_sum(self.isa, s, mx);
        rows::scale(self.isa, s, 1.0 / den);
        if let Some(m) = self.mask {
            for (c, e) in s.iter_mut().enumerate() {
                if !m[j0 + c] {
                    *e = 0.0;
                }
            }
        }
    }
}

/// The sizes of one attention call.
struct Dims {
    b: usize,
    h: usize,
    nq: usize,
    nk: usize,
    d: usize,
    dv: usize,
}

/// The sizes (the check step's rules) and the key mask as flags.
fn dims_and_mask(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<(Dims, Option<Vec<bool>>)> {
    let crate::backend::check::AttnDims {
        b,
        h,
        nq,
        nk,
        d,
        dv,
    } = crate::backend::check::attention_dims(q, k, v, None, opts.key_mask, opts.window)?;
    let mask = match opts.key_mask {
        Some(m) => Some(m.to_vec_f32()?.iter().map(|&x| x != 0.0).collect()),
        None => None,
    };
    Ok((
        Dims {
            b,
            h,
            nq,
            nk,
            d,
            dv,
        },
        mask,
    ))
}

fn attention_impl(
    q: &Tensor,
    k: &Tensor,
    diff: Option<(&Tensor, &Tensor)>,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    let (
        Dims {
            b,
            h,
            nq,
            nk,
            d,
            dv,
        },
        mask,
    ) = dims_and_mask(q, k, v, opts)?;
    let isa = cpu::current();
    let qc = q.contiguous()?;
    let kc = k.contiguous()?;
    let vc = v.contiguous()?;
    let qd = f32_data(&qc)?;
    let kd = f32_data(&kc)?;
    let vd = f32_data(&vc)?;
    let diff_c = diff
        .map(|(q2, k2)| Ok::<_, crate::CoreError>((q2.contiguous()?, k2.contiguous()?)))
        .transpose()?;
    let diff_d = match &diff_c {
        Some((q2, k2)) => Some((f32_data(q2)?, f32_data(k2)?)),
        None => None,
    };
    let mut out = vec![0f32; b * h * nq * dv];
    if dv == 0 || nq == 0 {
        return Tensor::from_vec(out, &[b, h, nq, dv]);
    }
    threads::install(|| {
        out.par_chunks_mut(nq * dv)
            .enumerate()
            .for_each(|(bh, ob)| {
                let bi = bh / h.max(1);
                let ctx = RowCtx {
                    isa,
                    opts,
                    mask: mask.as_ref().map(|m| &m[bi * nk..(bi + 1) * nk]),
                    nk,
                };
                let qb = &qd[bh * nq * d..(bh + 1) * nq * d];
                let kb = &kd[bh * nk * d..(bh + 1) * nk * d];
                let vb = &vd[bh * nk * dv..(bh + 1) * nk * dv];
                let db = diff_d.as_ref().map(|(q2, k2)| {
                    (
                        &q2[bh * nq * d..(bh + 1) * nq * d],
                        &k2[bh * nk * d..(bh + 1) * nk * d],
                    )
                });
                // Without a band every query block sees every key: the keys of this head are
                // packed once for all of its blocks.
                let shared = opts
                    .window
                    .is_none()
                    .then(|| HeadKeys::pack(&ctx, 0, nk, d, dv, kb, vb, db));
                ob.par_chunks_mut(QB * dv).enumerate().for_each(|(blk, o)| {
                    let i0 = blk * QB;
                    let i1 = (i0 + QB).min(nq);
                    let (klo, khi) = key_range(opts, nk, i0, i1);
                    let own;
                    let keys = match &shared {
                        Some(k) => k,
                        None => {
                            own = HeadKeys::pack(&ctx, klo, khi, d, dv, kb, vb, db);
                            &own
                        }
                    };
                    query_block(&ctx, keys, i0, i1, d, dv, qb, db, o);
                });
            });
    });
    Tensor::from_vec(out, &[b, h, nq, dv])
}

/// The key range `[lo, hi)` that queries `i0..i1` can see.
fn key_range(opts: &AttnOpts<'_>, nk: usize, i0: usize, i1: usize) -> (usize, usize) {
    match opts.window {
        Some((l, r)) => (i0.saturating_sub(l).min(nk), (i1 - 1 + r + 1).min(nk)),
        None => (0, nk),
    }
}

/// The keys `klo..khi` of one (batch, head), packed for the score and value products.
struct HeadKeys<'a> {
    isa: Isa,
    klo: usize,
    khi: usize,
    kp: Packed<'static>,
    k2p: Option<Packed<'static>>,
    vp: Packed<'a>,
}

impl<'a> HeadKeys<'a> {
    #[allow(clippy::too_many_arguments)]
    fn pack(
        ctx: &RowCtx<'_>,
        klo: usize,
        khi: usize,
        d: usize,
        dv: usize,
        kb: &[f32],
        vb: &'a [f32],
        db: Option<(&[f32], &[f32])>,
    ) -> HeadKeys<'a> {
        let nkb = khi.saturating_sub(klo);
        // Short key ranges (tiny chunks, bands) waste less of the narrower AVX2 panels.
        let isa = if ctx.isa == Isa::Avx512 && nkb < 256 {
            Isa::Avx2
        } else {
            ctx.isa
        };
        let pack_k =
            |k: &[f32]| Packed::new(isa, &BSrc::Nk(WData::F32(&k[klo * d..khi * d]), d), d, nkb);
        HeadKeys {
            isa,
            klo,
            khi,
            kp: pack_k(kb),
            k2p: db.map(|(_, k2)| pack_k(k2)),
            vp: Packed::kn(isa, &vb[klo * dv..khi * dv], nkb, dv),
        }
    }
}

/// Queries `i0..i1` of one (batch, head) against `keys` (which must hold every key they see):
/// `o` is their `[i1 − i0, Dv]` output rows.
#[allow(clippy::too_many_arguments)]
fn query_block(
    ctx: &RowCtx<'_>,
    keys: &HeadKeys<'_>,
    i0: usize,
    i1: usize,
    d: usize,
    dv: usize,
    qb: &[f32],
    db: Option<(&[f32], &[f32])>,
    o: &mut [f32],
) {
    let (isa, klo, khi) = (keys.isa, keys.klo, keys.khi);
    let (kp, k2p, vp) = (&keys.kp, &keys.k2p, &keys.vp);
    if khi <= klo {
        o.fill(0.0);
        return;
    }
    let tr = cpu::tile_rows(isa);
    let mut s = Vec::new();
    let mut s2 = Vec::new();
    let mut t0 = i0;
    while t0 < i1 {
        let mr = tr.min(i1 - t0);
        // Keys this tile sees, relative to klo, the start aligned to a panel.
        let (tlo, thi) = key_range(ctx.opts, ctx.nk, t0, t0 + mr);
        let (tlo, thi) = (tlo.max(klo) - klo, thi.min(khi) - klo);
        let plo = tlo / kp.nr * kp.nr;
        let w = thi.saturating_sub(plo);
        let ot = &mut o[(t0 - i0) * dv..(t0 - i0 + mr) * dv];
        if w == 0 {
            ot.fill(0.0);
            t0 += mr;
            continue;
        }
        s.resize(mr * w, 0.0);
        let qt = &qb[t0 * d..(t0 + mr) * d];
        small(isa, mr, qt, d, kp, 0, d, plo, thi, &mut s, w, false);
        for r in 0..mr {
            ctx.probs(t0 + r, klo + plo, &mut s[r * w..(r + 1) * w]);
        }
        if let (Some((q2, _)), Some(k2p)) = (db, k2p) {
            s2.resize(mr * w, 0.0);
            small(
                isa,
                mr,
                &q2[t0 * d..(t0 + mr) * d],
                d,
                k2p,
                0,
                d,
                plo,
                thi,
                &mut s2,
                w,
                false,
            );
            for r in 0..mr {
                ctx.probs(t0 + r, klo + plo, &mut s2[r * w..(r + 1) * w]);
            }
            s.iter_mut().zip(&s2).for_each(|(a, b)| *a -= b);
        }
        small(isa, mr, &s, w, vp, plo, w, 0, dv, ot, dv, false);
        t0 += mr;
    }
}
