//! Packed, blocked matrix product `C[M, N] = A[M, K] · B[K, N]` on top of the per-ISA
//! micro-kernel `gemm_tile` (an MR × NR register tile, MR = [`tile_rows`] and NR =
//! [`panel_width`] of the path; see [`super::scalar::gemm_tile`]).
//!
//! B comes from a [`BSrc`]: rows of a `[N, K]` weight in f32/f16/bf16 (possibly memory-mapped and
//! unaligned; converted to f32 while packing), a row-major `[K, N]` f32 matrix, or the implicit
//! im2col matrix of a 1-D convolution. B is packed into zero-padded panels of NR columns, KC rows
//! at a time. On the x86-64 paths (AVX2, AVX-512F) A is packed once per product into
//! micro-panels of MR rows (the MR values of each k next to each other) and the tasks write C in
//! place; the other paths read A in place and gather C from per-task blocks. Both give the same
//! bits.
//!
//! Work is split into blocks of output rows and columns, and each output's K-sum runs on one
//! thread in a fixed order (KC blocks in sequence, each an FMA chain from zero added to the
//! output), which no blocking choice changes: the result is bit-identical whatever the number of
//! threads (which may choose the row blocking) and whatever the tile rows of the path.

#[cfg(target_arch = "x86_64")]
use std::mem::MaybeUninit;

use rayon::prelude::*;

#[cfg(target_arch = "x86_64")]
use super::prefetch::Prefetch;
#[cfg(target_arch = "x86_64")]
use super::scalar::MR;
use super::{dispatch, panel_width, tile_rows, Isa};

/// Rows of K packed at a time.
const KC: usize = 256;
/// Output columns per task (a multiple of every NR).
const NB: usize = 128;
/// Output rows per task (a multiple of every path's tile rows).
const MB: usize = 240;
/// Row blocks from which B is packed once for all of them (with fewer, each row block packs
/// its panels slab by slab next to their use, where they stay in cache).
const PREPACK_MIN_BLOCKS: usize = 3;
/// Largest B packed once for all row blocks (f32 elements: 64 MiB).
const PREPACK_MAX: usize = 16 << 20;

mod source;

pub use source::{BSrc, Float, I8Rows, RowLayout, RowSource, WData, I8_GROUP};

/// `C[M, N] = A[M, K] · B[K, N]` with `A[i][k] = a[i·lda + k]` and C row-major (`ldc = N`).
/// Runs on the current rayon pool; bit-identical for any thread count.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &BSrc<'_>,
    c: &mut [f32],
) {
    gemm_with(isa, m, n, k, a, lda, b, None, None, c);
}

/// B of a product packed once for many calls: every column block's panels for every KC slab,
/// in the layout [`gemm`] packs into (so that a product with it is bit-identical to one
/// without). Weights are constant, so a layer can keep this next to its weight.
pub struct PackedB {
    isa: Isa,
    n: usize,
    k: usize,
    data: Vec<f32>,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedB({:?}, K {}, N {})", self.isa, self.k, self.n)
    }
}

impl PackedB {
    /// Pack `B[0..k][0..n]` for the micro-kernel of `isa` (on the current rayon pool).
    pub fn new(isa: Isa, b: &BSrc<'_>, n: usize, k: usize) -> PackedB {
        let nr = panel_width(isa);
        let (nt, nslabs) = (n.div_ceil(NB), k.div_ceil(KC));
        let mut data = vec![0f32; nt * nslabs * (NB / nr) * KC * nr];
        if !data.is_empty() {
            data.par_chunks_mut((NB / nr) * KC * nr)
                .enumerate()
                .for_each_init(Vec::new, |tmp, (idx, slab)| {
                    let (ni, s) = (idx / nslabs, idx % nslabs);
                    let (n0, k0) = (ni * NB, s * KC);
                    let (nb, kc) = (NB.min(n - n0), KC.min(k - k0));
                    b.pack_slab(nr, k0, kc, n0, nb, slab, tmp);
                });
        }
        PackedB { isa, n, k, data }
    }

    /// Whether these panels serve a `K × N` product on `isa`.
    pub fn fits(&self, isa: Isa, n: usize, k: usize) -> bool {
        self.isa == isa && self.n == n && self.k == k
    }

    /// Bytes held.
    pub fn nbytes(&self) -> usize {
        self.data.len() * 4
    }
}

/// [`gemm`] with B's panels packed in advance (`panels`, which must [`PackedB::fits`] this
/// product; B is then not read) and `bias[j]` added to every output of column `j` (after the
/// K-sum: `c = Σ + b`, as adding it to the product afterwards would).
#[allow(clippy::too_many_arguments)]
pub fn gemm_with(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &BSrc<'_>,
    panels: Option<&PackedB>,
    bias: Option<&[f32]>,
    c: &mut [f32],
) {
    let packs_a = cfg!(target_arch = "x86_64") && matches!(isa, Isa::Avx2 | Isa::Avx512);
    gemm_impl(isa, m, n, k, a, lda, b, panels, bias, c, packs_a);
}

/// [`gemm_with`], with A packed into micro-panels (`packs_a`, the x86-64 paths) or read in
/// place.
#[allow(clippy::too_many_arguments)]
fn gemm_impl(
    isa: Isa,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &BSrc<'_>,
    panels: Option<&PackedB>,
    bias: Option<&[f32]>,
    c: &mut [f32],
    packs_a: bool,
) {
    let c = &mut c[..m * n];
    let panels = panels.filter(|p| p.fits(isa, n, k));
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for row in c.chunks_exact_mut(n) {
            match bias {
                Some(bv) => row.copy_from_slice(&bv[..n]),
                None => row.fill(0.0),
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if packs_a && matches!(isa, Isa::Avx2 | Isa::Avx512) {
        // SAFETY: C holds m × n elements (sliced above), m, n, k > 0, and the path was
        // detected at run time (an `Isa` only reaches a product through `checked`/`current`).
        unsafe { gemm_pa(isa, (m, n, k), a, lda, b, panels, bias, c.as_mut_ptr()) };
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = packs_a;
    let plan = Plan::new(isa, m, n, k, b, panels);
    let (mbs, mt, nt, per_block) = (plan.mbs, plan.mt, plan.nt, plan.per_block);
    let pre = panels.or(plan.own.as_ref()).map(|p| &p.data[..]);
    let blocks: Vec<(usize, usize, Vec<f32>)> = (0..mt * nt)
        .into_par_iter()
        .map(|t| {
            let (mi, ni) = (t / nt, t % nt);
            let (m0, n0) = (mi * mbs, ni * NB);
            let (mb, nb) = (mbs.min(m - m0), NB.min(n - n0));
            let mut cl = vec![0f32; mb * nb];
            let packed = pre.map(|v| &v[ni * per_block..(ni + 1) * per_block]);
            block(isa, mb, nb, k, &a[m0 * lda..], lda, b, n0, packed, &mut cl);
            (m0, n0, cl)
        })
        .collect();
    // Rows of C gathered from the blocks (in parallel), with the bias added.
    c.par_chunks_mut(n)
        .with_min_len(8)
        .enumerate()
        .for_each(|(r, row)| {
            let (mi, rr) = (r / mbs, r % mbs);
            for (_, n0, cl) in &blocks[mi * nt..(mi + 1) * nt] {
                let nb = NB.min(n - n0);
                let (dst, src) = (&mut row[*n0..n0 + nb], &cl[rr * nb..(rr + 1) * nb]);
                match bias {
                    Some(bv) => {
                        for ((d, s), b) in dst.iter_mut().zip(src).zip(&bv[*n0..n0 + nb]) {
                            *d = s + b;
                        }
                    }
                    None => dst.copy_from_slice(src),
                }
            }
        });
}

/// How a product is split into tasks (see [`gemm_impl`]).
struct Plan {
    /// Rows per row block.
    mbs: usize,
    /// Row blocks.
    mt: usize,
    /// Column blocks.
    nt: usize,
    /// f32 elements of one column block's packed panels (every KC slab).
    per_block: usize,
    /// B packed here once for all row blocks, where that pays.
    own: Option<PackedB>,
}

impl Plan {
    fn new(isa: Isa, m: usize, n: usize, k: usize, b: &BSrc<'_>, panels: Option<&PackedB>) -> Plan {
        // Up to two row blocks' worth of rows run as one block when there are enough column tasks
        // for the threads: each task then packs its B panels once instead of once per row block
        // (the rows of A it streams still fit in L2). Blocking never changes a result bit: every
        // output's K-sum is the same FMA chain in any block.
        let nt = n.div_ceil(NB);
        let mbs = if m <= 2 * MB && nt >= 2 * rayon::current_num_threads() {
            m
        } else {
            MB
        };
        let mt = m.div_ceil(mbs);
        // With many row blocks, B is packed once up front and shared by all of them (each row
        // block would otherwise pack every panel again), unless the packed copy would be large.
        let nr = panel_width(isa);
        let nslabs = k.div_ceil(KC);
        let per_block = nslabs * (NB / nr) * KC * nr;
        let own: Option<PackedB> =
            (panels.is_none() && mt >= PREPACK_MIN_BLOCKS && nt * per_block <= PREPACK_MAX)
                .then(|| PackedB::new(isa, b, n, k));
        Plan {
            mbs,
            mt,
            nt,
            per_block,
            own,
        }
    }
}

/// The x86-64 product: A packed once into micro-panels shared by every task, each task writing
/// its block of C (see [`block_pa`]). Every element of C is written, so it may start
/// uninitialised ([`gemm_vec`]).
///
/// # Safety
/// `c` must be valid for writes of `m × n` f32 (initialised or not) and touched by nothing else
/// during the call; `m`, `n`, `k` > 0; `isa` a detected AVX2 or AVX-512F path.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_pa(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    lda: usize,
    b: &BSrc<'_>,
    panels: Option<&PackedB>,
    bias: Option<&[f32]>,
    c: *mut f32,
) {
    let plan = Plan::new(isa, m, n, k, b, panels);
    let (mbs, mt, nt, per_block) = (plan.mbs, plan.mt, plan.nt, plan.per_block);
    let pre = panels.or(plan.own.as_ref()).map(|p| &p.data[..]);
    let tr = tile_rows(isa);
    let mp = m.div_ceil(tr) * tr;
    let mut ap: Vec<f32> = Vec::with_capacity(mp * k);
    pack_a(a, lda, m, k, &mut ap.spare_capacity_mut()[..mp * k], tr);
    // SAFETY: `pack_a` wrote every one of the mp × k elements (padding rows included).
    unsafe { ap.set_len(mp * k) };
    let cp = CPtr(c);
    (0..mt * nt).into_par_iter().for_each(|t| {
        let (mi, ni) = (t / nt, t % nt);
        let (m0, n0) = (mi * mbs, ni * NB);
        let (mb, nb) = (mbs.min(m - m0), NB.min(n - n0));
        let packed = pre.map(|v| &v[ni * per_block..(ni + 1) * per_block]);
        let cp = &cp;
        // SAFETY: C holds m × n elements and (m0, n0) is inside it; this task alone
        // touches rows m0..m0 + mb, columns n0..n0 + nb.
        let ct = unsafe { cp.0.add(m0 * n + n0) };
        let run = |scratch: &mut Scratch| {
            // SAFETY: the block of C at `ct` (mb rows of nb elements, stride n) belongs to
            // this task, as above; the path (AVX2 or AVX-512F) was detected at run time.
            unsafe {
                block_pa(
                    isa,
                    (mb, nb, k),
                    (&ap, mp, m0 / tr),
                    b,
                    n0,
                    packed,
                    bias,
                    scratch,
                    (ct, n),
                )
            }
        };
        // The thread's buffers, or fresh ones should this thread already be inside a task (a
        // product never nests one, but a borrow must not panic).
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut s) => run(&mut s),
            Err(_) => run(&mut Scratch::default()),
        });
    });
}

/// [`gemm_with`] into a new `m × n` vector. On the x86-64 paths the product writes every
/// element itself, so the vector is not zero-filled first (one pass over the output saved).
#[allow(clippy::too_many_arguments)]
pub fn gemm_vec(
    isa: Isa,
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    lda: usize,
    b: &BSrc<'_>,
    panels: Option<&PackedB>,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let len = m * n;
    #[cfg(target_arch = "x86_64")]
    if len > 0 && k > 0 && matches!(isa, Isa::Avx2 | Isa::Avx512) && isa.is_available() {
        let panels = panels.filter(|p| p.fits(isa, n, k));
        let mut c: Vec<f32> = Vec::with_capacity(len);
        // SAFETY: `c` has capacity for m × n elements and is only ours; m, n, k > 0; the path
        // is available on this CPU (checked above).
        unsafe { gemm_pa(isa, (m, n, k), a, lda, b, panels, bias, c.as_mut_ptr()) };
        // SAFETY: `gemm_pa` wrote all m × n elements.
        unsafe { c.set_len(len) };
        return c;
    }
    let mut c = vec![0f32; len];
    gemm_with(isa, m, n, k, a, lda, b, panels, bias, &mut c);
    c
}

/// The B panels of one KC slab for the columns `n0..n0 + nb` of a block: a slice of the copy
/// packed once for all row blocks, or packed here into a buffer reused slab after slab.
struct SlabPanels<'p> {
    packed: Option<&'p [f32]>,
    bp: Vec<f32>,
    tmp: Vec<f32>,
    nr: usize,
    np: usize,
}

impl<'p> SlabPanels<'p> {
    fn new(packed: Option<&'p [f32]>, nr: usize, np: usize) -> SlabPanels<'p> {
        Self::with_buffers(packed, nr, np, (Vec::new(), Vec::new()))
    }

    /// [`SlabPanels::new`] reusing the buffers `(bp, tmp)` (of any content: a slab's panels
    /// are written whole before they are read); [`SlabPanels::into_buffers`] gives them back.
    fn with_buffers(
        packed: Option<&'p [f32]>,
        nr: usize,
        np: usize,
        (mut bp, tmp): (Vec<f32>, Vec<f32>),
    ) -> SlabPanels<'p> {
        if packed.is_none() {
            bp.resize(bp.len().max(np * KC * nr), 0.0);
        }
        SlabPanels {
            packed,
            bp,
            tmp,
            nr,
            np,
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn into_buffers(self) -> (Vec<f32>, Vec<f32>) {
        (self.bp, self.tmp)
    }

    fn slab(&mut self, b: &BSrc<'_>, k0: usize, kc: usize, n0: usize, nb: usize) -> &[f32] {
        let (nr, np) = (self.nr, self.np);
        match self.packed {
            Some(v) => {
                let s = (k0 / KC) * (NB / nr) * KC * nr;
                &v[s..s + np * KC * nr]
            }
            None => {
                b.pack_slab(nr, k0, kc, n0, nb, &mut self.bp, &mut self.tmp);
                &self.bp
            }
        }
    }
}

/// One output block `C[mb, nb]` (row-major, `ldc = nb`) for B columns `n0..n0 + nb`. `packed`
/// holds this column block's panels for every KC slab (slab `s` at `s · (NB / nr) · KC · nr`),
/// or `None` to pack them here, slab by slab.
#[allow(clippy::too_many_arguments)]
fn block(
    isa: Isa,
    mb: usize,
    nb: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &BSrc<'_>,
    n0: usize,
    packed: Option<&[f32]>,
    c: &mut [f32],
) {
    let nr = panel_width(isa);
    let np = nb.div_ceil(nr);
    let mut slabs = SlabPanels::new(packed, nr, np);
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(k - k0);
        let panels = slabs.slab(b, k0, kc, n0, nb);
        let mut i0 = 0;
        while i0 < mb {
            let mr = tile_rows(isa).min(mb - i0);
            let at = &a[i0 * lda + k0..];
            for p in 0..np {
                let nc = nr.min(nb - p * nr);
                let panel = &panels[p * KC * nr..p * KC * nr + kc * nr];
                let ct = &mut c[i0 * nb + p * nr..];
                dispatch!(
                    isa,
                    gemm_tile(mr, kc, at, lda, panel, nr, ct, nb, nc, k0 > 0)
                );
            }
            i0 += mr;
        }
        k0 += kc;
    }
}

/// The output pointer shared by the tasks of a product (each writes its own block).
#[cfg(target_arch = "x86_64")]
struct CPtr(*mut f32);
// SAFETY: tasks write disjoint blocks of C through it, and the product waits for all of them.
#[cfg(target_arch = "x86_64")]
unsafe impl Send for CPtr {}
// SAFETY: as above.
#[cfg(target_arch = "x86_64")]
unsafe impl Sync for CPtr {}

/// Pack the rows of `A[m, k]` into micro-panels of `tr` rows (6 or 12, the tile rows of the
/// path), slab-major: the KC slab from `k0` holds every tile's micro-panel for it, one after
/// the other, from `out[k0 · mp..]` (`mp` = `m` rounded up to whole tiles), tile `t` at
/// `k0 · mp + t · kc · tr` with its element `(r, k0 + kk)` at `kk · tr + r`; rows past `m` zero.
/// Every element of `out` (`mp · k` of them) is written.
/// The A a slab needs is then one contiguous run (tiles a whole K apart would land in the same
/// few cache sets). In parallel over tiles.
#[cfg(target_arch = "x86_64")]
fn pack_a(a: &[f32], lda: usize, m: usize, k: usize, out: &mut [MaybeUninit<f32>], tr: usize) {
    if tr == super::avx512::MR {
        pack_a_t::<{ super::avx512::MR }>(a, lda, m, k, out);
    } else {
        pack_a_t::<MR>(a, lda, m, k, out);
    }
}

/// [`pack_a`] for `MR` tile rows.
#[cfg(target_arch = "x86_64")]
fn pack_a_t<const MR: usize>(
    a: &[f32],
    lda: usize,
    m: usize,
    k: usize,
    out: &mut [MaybeUninit<f32>],
) {
    let mp = m.div_ceil(MR) * MR;
    for k0 in (0..k).step_by(KC) {
        let kc = KC.min(k - k0);
        let slab = &mut out[k0 * mp..(k0 + kc) * mp];
        slab.par_chunks_mut(kc * MR).enumerate().for_each(|(t, o)| {
            let rows = MR.min(m - t * MR);
            let src: [&[f32]; MR] = std::array::from_fn(|r| {
                if r < rows {
                    &a[(t * MR + r) * lda + k0..(t * MR + r) * lda + k0 + kc]
                } else {
                    &[]
                }
            });
            if rows == MR {
                for (kk, ov) in o.chunks_exact_mut(MR).enumerate() {
                    for (v, row) in ov.iter_mut().zip(&src) {
                        v.write(row[kk]);
                    }
                }
            } else {
                for (kk, ov) in o.chunks_exact_mut(MR).enumerate() {
                    for (v, row) in ov.iter_mut().zip(&src) {
                        v.write(row.get(kk).copied().unwrap_or(0.0));
                    }
                }
            }
        });
    }
}

/// Row stride of the buffer a [`block_pa`] task accumulates its block of C in: the columns of a
/// block plus 16, so that the rows of a register tile fall in different cache sets (rows of C
/// itself are often a power of two apart, and the tile's loads and stores at the end of each
/// slab then evict each other and the B panel).
#[cfg(target_arch = "x86_64")]
const LDL: usize = NB + 16;

/// [`block`] on the AVX2 or AVX-512F path, from A packed by [`pack_a`] (`ap`, of `mp` padded
/// rows; this block's tiles start at tile `t0`) into C at `c` with row stride `ldc`, `bias[n0 +
/// j]` added to column `j` when given. Per KC slab, each B micro-panel (16 columns, 16 KiB on
/// AVX2; 32 columns, 32 KiB on AVX-512) stays in L1 while the A micro-panels of every tile
/// stream past it from L2 (contiguous, so rows of A a power of two apart no longer compete for
/// the same cache sets). The block accumulates in `cl` (rows [`LDL`] apart) and is written to
/// C once at the end. Each output's K-sum is the FMA chain of [`block`] (same slabs, same
/// order), and the bias is added to the finished sum: the result is bit-identical to it.
///
/// # Safety
/// `isa` must be a detected x86-64 path (AVX2 + FMA, or AVX-512F with them), and
/// `c[r·ldc + j]` for `r < mb`, `j < nb` valid for writes (initialised or not; they are only
/// written) and touched by no other thread during the call.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn block_pa(
    isa: Isa,
    (mb, nb, k): (usize, usize, usize),
    (ap, mp, t0): (&[f32], usize, usize),
    b: &BSrc<'_>,
    n0: usize,
    packed: Option<&[f32]>,
    bias: Option<&[f32]>,
    scratch: &mut Scratch,
    (c, ldc): (*mut f32, usize),
) {
    let (nr, tr) = (panel_width(isa), tile_rows(isa));
    let np = nb.div_ceil(nr);
    let mt = mb.div_ceil(tr);
    // Stale contents are fine: the first slab writes (not adds) every element copied out.
    let cl = &mut scratch.cl;
    cl.resize(cl.len().max(mt * tr * LDL), 0.0);
    let mut slabs = SlabPanels::with_buffers(packed, nr, np, std::mem::take(&mut scratch.b));
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(k - k0);
        let panels = slabs.slab(b, k0, kc, n0, nb);
        // The next slab's B, fetched into L2 a little at a time while this one is multiplied
        // (packing it then reads cache instead of memory).
        let next = (packed.is_none() && k0 + kc < k)
            .then(|| b.prefetch(k0 + kc, KC.min(k - k0 - kc), n0, nb))
            .flatten();
        let (steps, lines) = (np * mt, next.as_ref().map_or(0, Prefetch::lines));
        let slab_a = &ap[k0 * mp + t0 * kc * tr..];
        for p in 0..np {
            let nc = nr.min(nb - p * nr);
            let panel = &panels[p * KC * nr..p * KC * nr + kc * nr];
            for t in 0..mt {
                if let Some(pf) = &next {
                    let s = p * mt + t;
                    pf.fetch(s * lines / steps, (s + 1) * lines / steps);
                }
                let mr = tr.min(mb - t * tr);
                let at = &slab_a[t * kc * tr..(t + 1) * kc * tr];
                let ct = cl[t * tr * LDL + p * nr..].as_mut_ptr();
                let kernel = if isa == Isa::Avx512 {
                    super::avx512::gemm_tile_pa
                } else {
                    super::avx2::gemm_tile_pa
                };
                // SAFETY: the tile (mr ≤ tr rows of LDL from t·tr, nc ≤ nr columns from p·nr,
                // inside LDL) lies inside `cl`; the path's features are guaranteed by the caller.
                unsafe { kernel(mr, kc, at, panel, ct, LDL, nc, k0 > 0) };
            }
        }
        k0 += kc;
    }
    for r in 0..mb {
        let src = &cl[r * LDL..r * LDL + nb];
        // SAFETY: row r of the caller's block of C (nb elements from c + r·ldc, possibly
        // uninitialised, so only written through the pointer), which no other thread touches
        // during the call.
        unsafe {
            let row = c.add(r * ldc);
            match bias {
                Some(bv) => {
                    for (j, (s, b)) in src.iter().zip(&bv[n0..n0 + nb]).enumerate() {
                        row.add(j).write(s + b);
                    }
                }
                None => std::ptr::copy_nonoverlapping(src.as_ptr(), row, nb),
            }
        }
    }
    scratch.b = slabs.into_buffers();
}

/// Buffers of a [`block_pa`] task, kept per thread between tasks and products so that no task
/// allocates or zero-fills them: its block of C, and one slab of B panels with the conversion
/// buffer (when B is not packed in advance). A few hundred KiB per thread.
#[cfg(target_arch = "x86_64")]
#[derive(Default)]
struct Scratch {
    cl: Vec<f32>,
    b: (Vec<f32>, Vec<f32>),
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// B panels for many small products (attention keys and values): packed once, or borrowed from
/// a row-major `[K, N]` matrix whose width is a multiple of the panel width.
pub struct Packed<'a> {
    /// Panels: panel `p` starts at `p · pstride`, its row `k` at `k · ldb` from there.
    pub data: std::borrow::Cow<'a, [f32]>,
    /// Panel width.
    pub nr: usize,
    /// Row stride inside a panel.
    pub ldb: usize,
    /// Distance between panels.
    pub pstride: usize,
}

impl<'a> Packed<'a> {
    /// Use a row-major `[k, n]` matrix in place when its width is a multiple of the panel width of
    /// `isa`, else pack it.
    pub fn kn(isa: Isa, b: &'a [f32], k: usize, n: usize) -> Packed<'a> {
        let nr = panel_width(isa);
        if n.is_multiple_of(nr) {
            Packed {
                data: std::borrow::Cow::Borrowed(&b[..k * n]),
                nr,
                ldb: n,
                pstride: nr,
            }
        } else {
            Packed::new(isa, &BSrc::Kn(b, n), k, n)
        }
    }

    /// Pack `B[0..k][0..n]` whole (one K block) for the micro-kernel of `isa`.
    pub fn new(isa: Isa, b: &BSrc<'_>, k: usize, n: usize) -> Packed<'static> {
        let nr = panel_width(isa);
        let np = n.div_ceil(nr);
        let mut data = vec![0f32; np * k * nr];
        let mut tmp = Vec::new();
        if k > 0 {
            for p in 0..np {
                let nc = nr.min(n - p * nr);
                b.pack(
                    nr,
                    0,
                    k,
                    p * nr,
                    nc,
                    &mut data[p * k * nr..(p + 1) * k * nr],
                    &mut tmp,
                );
            }
        }
        Packed {
            data: std::borrow::Cow::Owned(data),
            nr,
            ldb: nr,
            pstride: k * nr,
        }
    }

    /// Panel `p` from row `k0` on (rows `k0..k0 + kc` readable).
    #[inline]
    pub fn panel(&self, p: usize, k0: usize, kc: usize) -> &[f32] {
        let s = p * self.pstride + k0 * self.ldb;
        &self.data[s..s + (kc.max(1) - 1) * self.ldb + self.nr]
    }
}

/// `C[m × ldc] (=|+=) A[m × kc] · Bpacked[k0..k0+kc][n0..n1]`, written at columns `0..n1 − n0`
/// of C, where `n0` is a multiple of the panel width, in register tiles of the path's tile rows
/// (the bits do not depend on them). Single-threaded.
#[allow(clippy::too_many_arguments)]
pub fn small(
    isa: Isa,
    m: usize,
    a: &[f32],
    lda: usize,
    b: &Packed,
    k0: usize,
    kc: usize,
    n0: usize,
    n1: usize,
    c: &mut [f32],
    ldc: usize,
    acc: bool,
) {
    let nr = b.nr;
    debug_assert_eq!(n0 % nr, 0);
    if kc == 0 {
        if !acc {
            for r in 0..m {
                c[r * ldc..r * ldc + (n1 - n0)].fill(0.0);
            }
        }
        return;
    }
    let tr = tile_rows(isa);
    let mut i0 = 0;
    while i0 < m {
        let mr = tr.min(m - i0);
        let mut j = n0;
        while j < n1 {
            let nc = nr.min(n1 - j);
            let panel = b.panel(j / nr, k0, kc);
            let ct = &mut c[i0 * ldc + (j - n0)..];
            dispatch!(
                isa,
                gemm_tile(mr, kc, &a[i0 * lda..], lda, panel, b.ldb, ct, ldc, nc, acc)
            );
            j += nc;
        }
        i0 += mr;
    }
}

#[cfg(test)]
mod tests;
