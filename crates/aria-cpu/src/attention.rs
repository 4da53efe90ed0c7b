//! Fused scaled-dot-product attention on slices: the CPU body of `aria_core::ops::attention`
//! (plain, key-masked, banded and differential) and of its AMX variant.
//!
//! Queries are processed in tiles; each tile computes its full row of scores (only the keys its
//! rows can see: with a band the work is O(N · band), never O(N²)), an exact max-subtracted
//! softmax, and `P·V`, all with the packed matrix micro-kernels. Heads and query blocks are split
//! over the rayon pool the call runs on; every reduction stays inside one task, so the thread
//! count never changes a bit.

pub use aria_tensor::backend::check::AttnDims as Dims;
use rayon::prelude::*;

use crate::gemm::{small, BSrc, Packed, WData};
use crate::{rows, Isa};

/// Query rows per task: keys and values are packed once per task.
const QB: usize = 64;

/// How scores become probabilities.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rule {
    /// Multiplier of `q·k`.
    pub scale: f32,
    /// Logit soft-capping `c·tanh(s/c)` applied after scaling.
    pub softcap: Option<f32>,
    /// Masked keys are excluded from the softmax (`true`) or keep their weight in the
    /// denominator and contribute zero values (`false`, the reference's CPU semantics).
    pub exclude: bool,
    /// Band: query `i` sees keys `j` with `i - left <= j <= i + right`.
    pub window: Option<(usize, usize)>,
}

/// Attention (or differential attention `Attn(q, k, v) − Attn(q2, k2, v)` when `diff` holds
/// `(q2, k2)`) of contiguous f32 slices shaped as `dims` says, with the key validity `mask`
/// (`[b, nk]`, `None`: all valid); returns `[b, h, nq, dv]`.
pub fn attention(
    q: &[f32],
    k: &[f32],
    diff: Option<(&[f32], &[f32])>,
    v: &[f32],
    dims: Dims,
    rule: &Rule,
    mask: Option<&[bool]>,
) -> Vec<f32> {
    let Dims {
        b,
        h,
        nq,
        nk,
        d,
        dv,
    } = dims;
    let isa = crate::current();
    let mut out = vec![0f32; b * h * nq * dv];
    if dv == 0 || nq == 0 {
        return out;
    }
    out.par_chunks_mut(nq * dv)
        .enumerate()
        .for_each(|(bh, ob)| {
            let bi = bh / h.max(1);
            let ctx = RowCtx {
                isa,
                rule,
                mask: mask.map(|m| &m[bi * nk..(bi + 1) * nk]),
                nk,
            };
            let qb = &q[bh * nq * d..(bh + 1) * nq * d];
            let kb = &k[bh * nk * d..(bh + 1) * nk * d];
            let vb = &v[bh * nk * dv..(bh + 1) * nk * dv];
            let db = diff.map(|(q2, k2)| {
                (
                    &q2[bh * nq * d..(bh + 1) * nq * d],
                    &k2[bh * nk * d..(bh + 1) * nk * d],
                )
            });
            // Without a band every query block sees every key: the keys of this head are
            // packed once for all of its blocks.
            let shared = rule
                .window
                .is_none()
                .then(|| HeadKeys::pack(&ctx, 0, nk, d, dv, kb, vb, db));
            ob.par_chunks_mut(QB * dv).enumerate().for_each(|(blk, o)| {
                let i0 = blk * QB;
                let i1 = (i0 + QB).min(nq);
                let (klo, khi) = key_range(rule, nk, i0, i1);
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
    out
}

/// [`attention`] with its two products on the AMX tile unit ([`crate::amx_attn`]): every
/// (batch, head) on a thread of the pool, its buffers reused from head to head. The caller
/// checks that the unit is there (`bf16dot::amx_available() && bf16dot::native()`).
#[cfg(target_arch = "x86_64")]
pub fn attention_amx(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: Dims,
    rule: &Rule,
    mask: Option<&[bool]>,
) -> Vec<f32> {
    let Dims {
        b,
        h,
        nq,
        nk,
        d,
        dv,
    } = dims;
    let isa = crate::current();
    let mut out = vec![0f32; b * h * nq * dv];
    if dv == 0 || nq == 0 || nk == 0 {
        return out;
    }
    out.par_chunks_mut(nq * dv)
        .enumerate()
        .for_each(|(bh, ob)| {
            let ctx = RowCtx {
                isa,
                rule,
                mask: mask.map(|m| &m[(bh / h) * nk..(bh / h + 1) * nk]),
                nk,
            };
            crate::amx_attn::with_thread_buffers(|buf| {
                crate::amx_attn::head(
                    buf,
                    &q[bh * nq * d..(bh + 1) * nq * d],
                    &k[bh * nk * d..(bh + 1) * nk * d],
                    &v[bh * nk * dv..(bh + 1) * nk * dv],
                    (nq, nk, d, dv),
                    |i, row| ctx.probs(i, 0, row),
                    ob,
                )
            });
        });
    out
}

/// Everything a query tile needs to turn scores into probabilities.
struct RowCtx<'a> {
    isa: Isa,
    rule: &'a Rule,
    /// Key validity of this batch item (`None`: all valid).
    mask: Option<&'a [bool]>,
    nk: usize,
}

impl RowCtx<'_> {
    /// Turn the raw `q·k` row `s` (keys `j0..j0 + s.len()`) of query `i` into probabilities.
    fn probs(&self, i: usize, j0: usize, s: &mut [f32]) {
        let o = self.rule;
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
        if let (true, Some(m)) = (o.exclude, self.mask) {
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

/// The key range `[lo, hi)` that queries `i0..i1` can see.
fn key_range(rule: &Rule, nk: usize, i0: usize, i1: usize) -> (usize, usize) {
    match rule.window {
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
    let tr = crate::tile_rows(isa);
    let mut s = Vec::new();
    let mut s2 = Vec::new();
    let mut t0 = i0;
    while t0 < i1 {
        let mr = tr.min(i1 - t0);
        // Keys this tile sees, relative to klo, the start aligned to a panel.
        let (tlo, thi) = key_range(ctx.rule, ctx.nk, t0, t0 + mr);
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
