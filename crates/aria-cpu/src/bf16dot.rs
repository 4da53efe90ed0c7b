//! Matrix products with bf16 inputs and f32 accumulation: `C[M, N] = A[M, K] · Wᵀ + b` with the
//! weight `W [N, K]` packed once into [`Bf16Panels`] and A rounded to bf16 in every call.
//!
//! On x86-64 CPUs with AVX-512 BF16 the micro-kernel is `vdpbf16ps` (32 products per
//! instruction: twice the f32 FMA rate on AMD Zen 5, half of it on Intel cores, see
//! [`beats_f32`]); everywhere else a scalar emulation of that
//! instruction computes the same bits, so results never depend on the machine.
//!
//! Arithmetic of one output: an f32 accumulator from zero runs over the K pairs in order; pair
//! `p` adds `a[2p+1]·w[2p+1]`, then `a[2p]·w[2p]` (the order of `vdpbf16ps`), each addition
//! rounded to nearest even (a product of two bf16 is exact in f32). Subnormal bf16 inputs count
//! as zero and subnormal sums are flushed to zero, as the instruction does. The bias is added
//! after the sum. A is rounded to bf16 to nearest even (NaN stays NaN). Each output is one
//! chain on one thread: blocking and the thread count never change a bit.
//!
//! Layout: a pair is a `u32` (bf16 `x[2p]` in the low half, `x[2p+1]` in the high half, a zero
//! high half for an odd K). A goes into micro-panels of [`MR`] rows (tile `t`, pair `p`, row `r`
//! at `(t·KP + p)·MR + r`, rows past M zero), so a tile's broadcasts read consecutive words;
//! W into panels of [`NR`] output columns, panel `j` holding for every pair `p` the [`NR`]
//! columns' pairs next to each other (zero-padded past N, and past K to a multiple of 16 pairs,
//! the depth of a tile of the AMX product, which uses the same panels).
//!
//! [`Kernel::Amx`] multiplies on the AMX tile unit instead: the same inputs and accumulation
//! order per output, but the unit's own rounding inside each tile product, so its bits are its own.

use aria_tensor::Tensor;
use rayon::prelude::*;

/// Output columns per panel (two 16-lane vectors).
pub const NR: usize = 48;
/// Rows of the register tile (2 × 12 accumulators, 2 weight vectors and a broadcast).
pub const MR: usize = 8;
/// K pairs per block: a 32 KiB slice of a panel, reused by every row tile of a task.
const KCP: usize = 256;
/// Panels per task.
const NBP: usize = 4;
/// Rows per task (a multiple of [`MR`]).
const MB: usize = 128;

/// Whether this CPU runs the `vdpbf16ps` kernel (AVX-512F and AVX-512 BF16; detected once).
pub fn native() -> bool {
    static NATIVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NATIVE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bf16")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Whether the `vdpbf16ps` kernel outruns f32 FMA on this CPU: [`native`] and an AMD core.
///
/// AMD cores issue a 512-bit `vdpbf16ps` at the rate of a 512-bit FMA, so bf16 products run
/// at twice the f32 rate (measured on Zen 5: 620–725 GFLOP/s in `bench core`, 2.2–2.5× the f32
/// path). Intel cores with AVX-512 BF16 issue it at a quarter of the FMA rate
/// (one every ~2 cycles against two FMAs per cycle; measured on a Xeon with AVX-512 FP16:
/// 0.79 ns per `vdpbf16ps`, 0.19 ns per FMA, so 81 against 165 GFLOP/s on one core), half the
/// f32 rate in products. The rule is the vendor, read once from CPUID: deterministic on a
/// machine, unlike a timing probe.
pub fn beats_f32() -> bool {
    static BEATS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *BEATS.get_or_init(|| native() && amd())
}

/// Whether CPUID's vendor string is `AuthenticAMD`.
fn amd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let r = std::arch::x86_64::__cpuid(0);
        let mut v = [0u8; 12];
        v[..4].copy_from_slice(&r.ebx.to_le_bytes());
        v[4..8].copy_from_slice(&r.edx.to_le_bytes());
        v[8..].copy_from_slice(&r.ecx.to_le_bytes());
        &v == b"AuthenticAMD"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// bf16 bits of `x`, rounded to nearest even (a NaN stays a quiet NaN).
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if b & 0x7fff_ffff > 0x7f80_0000 {
        return ((b >> 16) | 0x40) as u16;
    }
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// A bf16 value as f32, subnormals as (signed) zero.
#[inline(always)]
fn daz(h: u32) -> f32 {
    let b = (h & 0xffff) << 16;
    if b & 0x7f80_0000 == 0 {
        f32::from_bits(b & 0x8000_0000)
    } else {
        f32::from_bits(b)
    }
}

/// `x`, a subnormal flushed to (signed) zero.
#[inline(always)]
fn ftz(x: f32) -> f32 {
    let b = x.to_bits();
    if b & 0x7f80_0000 == 0 {
        f32::from_bits(b & 0x8000_0000)
    } else {
        x
    }
}

/// One lane of `vdpbf16ps`: `acc + a.hi·w.hi`, then `+ a.lo·w.lo`.
#[inline(always)]
pub fn dot_pair(acc: f32, a: u32, w: u32) -> f32 {
    let t = ftz(acc + daz(a >> 16) * daz(w >> 16));
    ftz(t + daz(a) * daz(w))
}

/// Pack the pairs of `rows` rows of `k` f32 (`src[r·lda + i]`) into micro-panels of [`MR`]
/// rows: `out[(t·kp + p)·MR + r]` for row `t·MR + r`, `kp = ⌈k/2⌉` (`out` holds
/// `⌈rows/MR⌉·kp·MR` words; rows past `rows` are zero).
pub fn pack_a(src: &[f32], lda: usize, rows: usize, k: usize, out: &mut [u32]) {
    let kp = k.div_ceil(2);
    if kp == 0 {
        return;
    }
    out[..rows.div_ceil(MR) * kp * MR]
        .par_chunks_mut(kp * MR)
        .enumerate()
        .for_each_init(
            || vec![0u32; kp],
            |tmp, (t, o)| {
                for r in 0..MR {
                    let i = t * MR + r;
                    if i < rows {
                        let row = &src[i * lda..i * lda + k];
                        let (pairs, rest) = row.split_at(k & !1);
                        for (d, p) in tmp.iter_mut().zip(pairs.chunks_exact(2)) {
                            *d = u32::from(to_bf16(p[0])) | (u32::from(to_bf16(p[1])) << 16);
                        }
                        if let Some(&x) = rest.first() {
                            tmp[kp - 1] = u32::from(to_bf16(x));
                        }
                    } else {
                        tmp.fill(0);
                    }
                    for (p, v) in tmp.iter().enumerate() {
                        o[p * MR + r] = *v;
                    }
                }
            },
        );
}

/// Which kernel multiplies in [`matmul`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// The scalar emulation of `vdpbf16ps`: the documented arithmetic on every CPU.
    Emulated,
    /// `vdpbf16ps` where [`native`] holds, else the emulation: the same bits either way.
    Native,
    /// The AMX tile unit where [`amx_available`] holds (else [`Kernel::Native`]): its own bits.
    Amx,
}

/// Whether this CPU and OS run [`Kernel::Amx`] (AMX-TILE and AMX-BF16, Linux granting the
/// tile state; asked for once).
pub fn amx_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::amx::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

thread_local! {
    static TILES_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether bf16 products started on this thread take the AMX tile unit: [`amx_available`],
/// unless [`without_tiles`] turned it off here. This is the CPU backend's choice for bf16
/// products (weights in bf16 panels, attention allowed bf16 products); models never make it.
pub fn use_tiles() -> bool {
    amx_available() && !TILES_OFF.with(|c| c.get())
}

/// Run `f` with the AMX tile unit left out of the bf16 products it starts on this thread
/// (`vdpbf16ps` or its emulation instead; restored afterwards, also on unwinding): for
/// comparing the two units on one machine.
pub fn without_tiles<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0;
            TILES_OFF.with(|c| c.set(prev));
        }
    }
    let _restore = Restore(TILES_OFF.with(|c| c.replace(true)));
    f()
}

/// Whether CPUID reports AMX-TILE and AMX-BF16, whether or not the OS grants the tile state:
/// where this holds and [`amx_available`] does not, the OS refused the tile unit.
pub fn amx_in_cpuid() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::amx::in_cpuid()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Pairs per panel column for `k` inputs: `⌈k/2⌉` rounded up to a multiple of 16.
fn padded_pairs(k: usize) -> usize {
    k.div_ceil(2).div_ceil(16) * 16
}

/// A weight `[N, K]` in bf16 panels for [`matmul`].
#[derive(Clone)]
pub struct Bf16Panels {
    n: usize,
    k: usize,
    /// Pairs per panel column (`⌈K/2⌉` padded with zero pairs to a multiple of 16).
    kps: usize,
    /// `U8 [⌈N/48⌉, kps, 48 · 4]`, starting a cache line (a tile row of 16 pairs is one
    /// line, which the AMX product loads): checked to be a host tensor of whole words when
    /// made ([`Bf16Panels::from_tensor`]).
    data: Tensor,
}

impl std::fmt::Debug for Bf16Panels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bf16Panels(N {}, K {})", self.n, self.k)
    }
}

impl Bf16Panels {
    /// Pack `n` rows of `k` bf16 values; `row(i, out)` writes the bits of row `i` into
    /// `out[..k]` (on the current rayon pool, a panel per task).
    pub fn from_rows(n: usize, k: usize, row: impl Fn(usize, &mut [u16]) + Sync) -> Bf16Panels {
        let (kp, kps) = (k.div_ceil(2), padded_pairs(k));
        Self::build(n, k, |data| {
            data.par_chunks_mut(kps * NR).enumerate().for_each_init(
                || vec![0u16; 2 * kp],
                |buf, (j, panel)| {
                    for c in 0..NR.min(n - j * NR) {
                        buf.fill(0);
                        row(j * NR + c, &mut buf[..k]);
                        for p in 0..kp {
                            panel[p * NR + c] =
                                u32::from(buf[2 * p]) | (u32::from(buf[2 * p + 1]) << 16);
                        }
                    }
                },
            );
        })
    }

    /// Panels from the `bf16_panels` format's blocks: `n` rows of `⌈k/2⌉` little-endian pair
    /// words each, one row after the other (`bytes` holds at least `n · ⌈k/2⌉ · 4` bytes).
    pub fn from_pair_bytes(n: usize, k: usize, bytes: &[u8]) -> Bf16Panels {
        let row_bytes = k.div_ceil(2) * 4;
        Self::from_pairs(n, k, |row, out| {
            let r = &bytes[row * row_bytes..(row + 1) * row_bytes];
            for (o, c) in out.iter_mut().zip(r.chunks_exact(4)) {
                *o = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        })
    }

    /// Panels for `[n, k]`, their words written by `fill` (zeros before; not called when
    /// there are none).
    fn build(n: usize, k: usize, fill: impl FnOnce(&mut [u32])) -> Bf16Panels {
        let kps = padded_pairs(k);
        let words = n.div_ceil(NR) * kps * NR;
        let shape = [n.div_ceil(NR), kps, NR * 4];
        let fill = |w: &mut [u32]| {
            if !w.is_empty() {
                fill(w)
            }
        };
        // A host tensor of the computed size always builds; the fallback keeps the library
        // free of a panic path and is never taken.
        let data = super::aligned::line_aligned_tensor(words, &shape, fill)
            .unwrap_or_else(|_| Tensor::zeros(&[0, kps, NR * 4], aria_tensor::DType::U8));
        Bf16Panels { n, k, kps, data }
    }

    /// The layout's shape for `[n, k]`: `U8 [⌈n/48⌉, kps, 192]`.
    pub fn layout_shape(n: usize, k: usize) -> [usize; 3] {
        [n.div_ceil(NR), padded_pairs(k), NR * 4]
    }

    /// Panels of `[n, k]` held in `t` (what [`Bf16Panels::tensor`] gave): a host `U8` tensor of
    /// [`Bf16Panels::layout_shape`]. Bytes that do not start on a word boundary are copied.
    pub fn from_tensor(n: usize, k: usize, t: &Tensor) -> aria_tensor::Result<Bf16Panels> {
        let want = Self::layout_shape(n, k);
        if t.dtype() != aria_tensor::DType::U8 || t.shape() != want || !t.device().is_cpu() {
            return Err(aria_tensor::CoreError::shape(
                "bf16 panels",
                format!(
                    "the panels of a [{n}, {k}] weight are a host U8 tensor {want:?} (got {} {:?})",
                    t.dtype(),
                    t.shape()
                ),
                &[t.shape(), &want],
            ));
        }
        if super::aligned::words(t).is_some() {
            return Ok(Bf16Panels {
                n,
                k,
                kps: want[1],
                data: t.clone(),
            });
        }
        let src = t.contiguous()?.to_vec::<u8>()?;
        Ok(Self::build(n, k, |w| {
            for (d, c) in w.iter_mut().zip(src.chunks_exact(4)) {
                *d = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }))
    }

    /// The panels as a tensor (`U8`, [`Bf16Panels::layout_shape`]), the CPU's operand of a
    /// `bf16_panels` product in the op set.
    pub fn tensor(&self) -> &Tensor {
        &self.data
    }

    /// The words, `⌈N/48⌉ · kps · 48`.
    fn words(&self) -> &[u32] {
        // Checked when the panels were made (`build`, `from_tensor`).
        super::aligned::words(&self.data).unwrap_or(&[])
    }

    /// [`Bf16Panels::from_rows`] for rows already in pairs: `pairs(i, out)` writes row `i` as
    /// `⌈k/2⌉` words `lo | hi << 16` (bf16 bits of elements `2p` and `2p + 1`; `hi` 0 past
    /// `k`), which is how a little-endian bf16 row lies in memory. The panels are the same; the
    /// columns are moved 16 × 16 words at a time through register transposes where the path
    /// has them (on the current rayon pool, a panel per task).
    pub fn from_pairs(n: usize, k: usize, pairs: impl Fn(usize, &mut [u32]) + Sync) -> Bf16Panels {
        const B: usize = 16;
        let (kp, kps) = (k.div_ceil(2), padded_pairs(k));
        let isa = super::current();
        let square = super::transpose::block(isa) == B;
        Self::build(n, k, |data| {
            data.par_chunks_mut(kps * NR).enumerate().for_each_init(
                || (vec![0u32; kp], vec![0f32; B * kp], [0f32; B * B]),
                |(row, rows, blk), (j, panel)| {
                    for c0 in (0..NR).step_by(B) {
                        let cols = B.min(n.saturating_sub(j * NR + c0));
                        if cols == 0 {
                            break;
                        }
                        // 16 rows as words (bit patterns carried in f32 slots: moved, never
                        // computed with), zero rows past n.
                        for r in 0..B {
                            let dst = &mut rows[r * kp..(r + 1) * kp];
                            if r < cols {
                                pairs(j * NR + c0 + r, row);
                                for (d, w) in dst.iter_mut().zip(row.iter()) {
                                    *d = f32::from_bits(*w);
                                }
                            } else {
                                dst.fill(0.0);
                            }
                        }
                        let mut p0 = 0;
                        if square {
                            while p0 + B <= kp {
                                super::transpose::square(isa, &rows[p0..], kp, &mut blk[..], B);
                                for pp in 0..B {
                                    let out = &mut panel[(p0 + pp) * NR + c0..][..B];
                                    for (o, v) in out.iter_mut().zip(&blk[pp * B..(pp + 1) * B]) {
                                        *o = v.to_bits();
                                    }
                                }
                                p0 += B;
                            }
                        }
                        for p in p0..kp {
                            for r in 0..cols {
                                panel[p * NR + c0 + r] = rows[r * kp + p].to_bits();
                            }
                        }
                    }
                },
            );
        })
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) fn n(&self) -> usize {
        self.n
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) fn k(&self) -> usize {
        self.k
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) fn kps(&self) -> usize {
        self.kps
    }

    #[cfg(target_arch = "x86_64")]
    pub(super) fn data(&self) -> &[u32] {
        self.words()
    }

    /// `[N, K]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.n, self.k]
    }

    /// Bytes held.
    pub fn nbytes(&self) -> usize {
        self.data.elem_count()
    }

    /// Row `i` of the weight as f32 (`out[..K]`).
    pub fn row(&self, i: usize, out: &mut [f32]) {
        let kps = self.kps;
        let (j, c) = (i / NR, i % NR);
        let panel = &self.words()[j * kps * NR..(j + 1) * kps * NR];
        for (kk, o) in out[..self.k].iter_mut().enumerate() {
            let w = panel[(kk / 2) * NR + c];
            let h = if kk % 2 == 0 { w & 0xffff } else { w >> 16 };
            *o = f32::from_bits(h << 16);
        }
    }
}

/// A raw pointer to C shared by the tasks, each writing its own block (also for the AMX
/// product).
pub(super) struct CPtr(pub(super) *mut f32);
// SAFETY: the tasks write disjoint blocks of C (see `matmul` here and in `amx`), and C
// outlives them.
unsafe impl Sync for CPtr {}

/// [`matmul`] into a new `m × n` vector. The AMX product writes every element itself, so there
/// the vector is not zero-filled first.
pub fn matmul_vec(
    kernel: Kernel,
    m: usize,
    a: &[f32],
    lda: usize,
    w: &Bf16Panels,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let len = m * w.n;
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Amx && len > 0 && w.k > 0 && amx_available() {
        let mut c: Vec<f32> = Vec::with_capacity(len);
        // SAFETY: `c` has capacity for m × n elements and is only ours; m, n and K are not
        // zero; AMX was granted (checked just now).
        unsafe { super::amx::matmul(m, a, lda, w, bias, c.as_mut_ptr()) };
        // SAFETY: the AMX product wrote all m × n elements.
        unsafe { c.set_len(len) };
        return c;
    }
    let mut c = vec![0f32; len];
    matmul(kernel, m, a, lda, w, bias, &mut c);
    c
}

/// `c[M, N] = a[M, K] · Wᵀ (+ bias)`, `a[i][kk] = a[i·lda + kk]`, with `kernel`
/// ([`Kernel::Native`] and [`Kernel::Emulated`] give the same bits). Runs on the current rayon
/// pool.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    kernel: Kernel,
    m: usize,
    a: &[f32],
    lda: usize,
    w: &Bf16Panels,
    bias: Option<&[f32]>,
    c: &mut [f32],
) {
    let (n, k) = (w.n, w.k);
    let kp = k.div_ceil(2);
    let c = &mut c[..m * n];
    if m == 0 || n == 0 {
        return;
    }
    if kp == 0 {
        for row in c.chunks_exact_mut(n) {
            match bias {
                Some(b) => row.copy_from_slice(&b[..n]),
                None => row.fill(0.0),
            }
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Amx && amx_available() {
        // SAFETY: `c` holds m × n elements (sliced above), m, n and K are not zero, and AMX
        // was granted (checked just now).
        unsafe { super::amx::matmul(m, a, lda, w, bias, c.as_mut_ptr()) };
        return;
    }
    let use_native = kernel != Kernel::Emulated && native();
    #[cfg(not(target_arch = "x86_64"))]
    let _ = use_native;
    let kps = w.kps;
    let mut ap = vec![0u32; m.div_ceil(MR) * kp * MR];
    pack_a(a, lda, m, k, &mut ap);
    let npanels = n.div_ceil(NR);
    let (mt, nt) = (m.div_ceil(MB), npanels.div_ceil(NBP));
    let cp = CPtr(c.as_mut_ptr());
    (0..mt * nt).into_par_iter().for_each(|t| {
        let (mi, ni) = (t / nt, t % nt);
        let (m0, j0) = (mi * MB, ni * NBP);
        let mb = MB.min(m - m0);
        let cp = &cp;
        for k0 in (0..kp).step_by(KCP) {
            let kc = KCP.min(kp - k0);
            for j in j0..(j0 + NBP).min(npanels) {
                let nc = NR.min(n - j * NR);
                let panel = &w.words()[(j * kps + k0) * NR..(j * kps + k0 + kc) * NR];
                for r0 in (0..mb).step_by(MR) {
                    let mr = MR.min(mb - r0);
                    let t0 = (m0 + r0) / MR;
                    let arow = &ap[(t0 * kp + k0) * MR..(t0 * kp + k0 + kc) * MR];
                    // SAFETY: rows m0 + r0 .. + mr and columns j·NR .. + nc lie inside C
                    // (m × n) and belong to this task alone.
                    let ct = unsafe { cp.0.add((m0 + r0) * n + j * NR) };
                    #[cfg(target_arch = "x86_64")]
                    if use_native {
                        // SAFETY: AVX-512F and AVX-512 BF16 were detected (`native`); `arow`
                        // holds kc pairs of an MR-row micro-panel, `panel` kc pairs of NR
                        // columns, and `ct` mr rows of nc writable elements at stride n.
                        unsafe { avx512bf16::tile(mr, kc, arow, panel, ct, n, nc, k0 > 0) };
                        continue;
                    }
                    // SAFETY: as above, for the scalar tile.
                    unsafe { tile_scalar(mr, kc, arow, panel, ct, n, nc, k0 > 0) };
                }
            }
        }
        if let Some(b) = bias {
            let (n0, n1) = (j0 * NR, ((j0 + NBP) * NR).min(n));
            for r in m0..m0 + mb {
                // SAFETY: row r, columns n0..n1 of this task's block, as above.
                let row = unsafe { std::slice::from_raw_parts_mut(cp.0.add(r * n + n0), n1 - n0) };
                for (d, bv) in row.iter_mut().zip(&b[n0..n1]) {
                    *d += bv;
                }
            }
        }
    });
}

/// The scalar tile: `mr` rows × `nc` columns, `kc` pairs, accumulating onto C when `acc`.
///
/// # Safety
/// `c` must be valid for `mr` rows of `nc` elements at stride `ldc`.
#[allow(clippy::too_many_arguments)]
unsafe fn tile_scalar(
    mr: usize,
    kc: usize,
    a: &[u32],
    b: &[u32],
    c: *mut f32,
    ldc: usize,
    nc: usize,
    acc: bool,
) {
    for r in 0..mr {
        for jj in 0..nc {
            // SAFETY: inside the block the caller owns.
            let out = unsafe { &mut *c.add(r * ldc + jj) };
            let mut s = if acc { *out } else { 0.0 };
            for p in 0..kc {
                s = dot_pair(s, a[p * MR + r], b[p * NR + jj]);
            }
            *out = s;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512bf16 {
    #![allow(clippy::incompatible_msrv)]
    use super::{MR, NR};
    use std::arch::x86_64::*;

    /// 16-lane vectors per panel row.
    const NV: usize = NR / 16;

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_m<const M: usize>(
        kc: usize,
        a: *const u32,
        b: *const u32,
        c: *mut f32,
        ldc: usize,
        nc: usize,
        acc: bool,
    ) {
        // Lane masks of the NV vectors of a row (columns past `nc` neither read nor written).
        let mut masks = [0 as __mmask16; NV];
        for (v, m) in masks.iter_mut().enumerate() {
            let lo = 16 * v;
            *m = if nc >= lo + 16 {
                0xffff
            } else if nc > lo {
                ((1u32 << (nc - lo)) - 1) as __mmask16
            } else {
                0
            };
        }
        // SAFETY: the caller guarantees the extents and the CPU features (see `tile`).
        unsafe {
            let mut cc = [[_mm512_setzero_ps(); NV]; M];
            if acc {
                for (r, row) in cc.iter_mut().enumerate() {
                    for (v, x) in row.iter_mut().enumerate() {
                        *x = _mm512_maskz_loadu_ps(masks[v], c.add(r * ldc + 16 * v));
                    }
                }
            }
            let zero: __m512bh = std::mem::transmute(_mm512_setzero_si512());
            for p in 0..kc {
                let mut bv = [zero; NV];
                for (v, x) in bv.iter_mut().enumerate() {
                    *x = std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                        b.add(p * NR + 16 * v) as *const __m512i,
                    ));
                }
                for (r, row) in cc.iter_mut().enumerate() {
                    let av: __m512bh =
                        std::mem::transmute(_mm512_set1_epi32(*a.add(p * MR + r) as i32));
                    for (x, bw) in row.iter_mut().zip(&bv) {
                        *x = _mm512_dpbf16_ps(*x, av, *bw);
                    }
                }
            }
            for (r, row) in cc.iter().enumerate() {
                for (v, x) in row.iter().enumerate() {
                    _mm512_mask_storeu_ps(c.add(r * ldc + 16 * v), masks[v], *x);
                }
            }
        }
    }

    /// The `vdpbf16ps` tile: `mr` ≤ [`MR`] rows × `nc` ≤ [`NR`] columns, `kc` pairs.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512 BF16; `c` must be valid for `mr` rows of `nc`
    /// elements at stride `ldc`.
    ///
    /// # Panics
    /// If `a` or `b` is shorter than the extents the call reads.
    #[target_feature(enable = "avx512f,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile(
        mr: usize,
        kc: usize,
        a: &[u32],
        b: &[u32],
        c: *mut f32,
        ldc: usize,
        nc: usize,
        acc: bool,
    ) {
        assert!(mr <= MR && nc <= NR && b.len() >= kc * NR && a.len() >= kc * MR);
        let (a, b) = (a.as_ptr(), b.as_ptr());
        // SAFETY: extents checked above; features and C guaranteed by the caller.
        unsafe {
            match mr {
                1 => tile_m::<1>(kc, a, b, c, ldc, nc, acc),
                2 => tile_m::<2>(kc, a, b, c, ldc, nc, acc),
                3 => tile_m::<3>(kc, a, b, c, ldc, nc, acc),
                4 => tile_m::<4>(kc, a, b, c, ldc, nc, acc),
                5 => tile_m::<5>(kc, a, b, c, ldc, nc, acc),
                6 => tile_m::<6>(kc, a, b, c, ldc, nc, acc),
                7 => tile_m::<7>(kc, a, b, c, ldc, nc, acc),
                8 => tile_m::<8>(kc, a, b, c, ldc, nc, acc),
                9 => tile_m::<9>(kc, a, b, c, ldc, nc, acc),
                10 => tile_m::<10>(kc, a, b, c, ldc, nc, acc),
                11 => tile_m::<11>(kc, a, b, c, ldc, nc, acc),
                _ => tile_m::<MR>(kc, a, b, c, ldc, nc, acc),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{with_isa, Isa};

    fn lcg(seed: u64, n: usize, scale: f32) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
            })
            .collect()
    }

    fn panels(w: &[f32], n: usize, k: usize) -> Bf16Panels {
        Bf16Panels::from_rows(n, k, |i, o| {
            for (d, v) in o.iter_mut().zip(&w[i * k..(i + 1) * k]) {
                *d = to_bf16(*v);
            }
        })
    }

    /// Packing from pair words (16 × 16 register transposes where the path has them) gives the
    /// panels packing from rows gives, on every path, for sizes around the panel and block
    /// widths and odd K.
    #[test]
    fn pairs_and_rows_pack_alike() {
        for (n, k) in [
            (1, 1),
            (5, 3),
            (47, 33),
            (48, 32),
            (49, 64),
            (16, 31),
            (100, 770),
            (130, 2048),
        ] {
            let w = lcg(n as u64 * 31 + k as u64, n * k, 3.0);
            let bits: Vec<u16> = w.iter().map(|&v| to_bf16(v)).collect();
            let want = panels(&w, n, k);
            for isa in Isa::available() {
                let got = with_isa(isa, || {
                    Bf16Panels::from_pairs(n, k, |i, o| {
                        let r = &bits[i * k..(i + 1) * k];
                        for (d, c) in o.iter_mut().zip(r.chunks(2)) {
                            *d =
                                u32::from(c[0]) | (u32::from(c.get(1).copied().unwrap_or(0)) << 16);
                        }
                    })
                });
                assert_eq!(got.shape(), [n, k]);
                assert!(got.words() == want.words(), "{n}x{k} on {isa:?}");
            }
        }
    }

    /// CPUID's vendor (the text default's rule) is the one the kernel reports.
    #[test]
    fn vendor_read_from_cpuid_matches_the_kernel_report() {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            aria_testing::skip_for_hardware("no /proc/cpuinfo to compare CPUID's vendor with");
            return;
        };
        let vendor = info
            .lines()
            .find_map(|l| l.strip_prefix("vendor_id"))
            .and_then(|v| v.split(':').nth(1))
            .map(str::trim);
        // Only an x86-64 build reads CPUID (an emulated aarch64 build reads the host's
        // /proc/cpuinfo but reports no vendor).
        if let Some(v) = vendor.filter(|_| cfg!(target_arch = "x86_64")) {
            assert_eq!(amd(), v == "AuthenticAMD", "{v}");
        }
        assert!(!beats_f32() || native());
    }

    /// The rounding matches `half`'s (round to nearest even) on ordinary values and ties.
    #[test]
    fn to_bf16_rounds_to_nearest_even() {
        for v in lcg(3, 10_000, 1e4).into_iter().chain([
            1.0 + 1.0 / 256.0,
            1.0 + 3.0 / 256.0,
            -0.0,
            f32::INFINITY,
            1e-40,
        ]) {
            assert_eq!(to_bf16(v), half::bf16::from_f32(v).to_bits(), "{v:e}");
        }
        assert!(f32::from_bits(u32::from(to_bf16(f32::NAN)) << 16).is_nan());
    }

    /// Edge sizes `(M, K, N)`: odd K, K past a 16-pair tile, N not a multiple of the panel or
    /// a tile, rows past a tile and a task.
    const EDGES: [(usize, usize, usize); 5] = [
        (1, 1, 1),
        (13, 7, 33),
        (97, 300, 65),
        (5, 513, 31),
        (200, 64, 130),
    ];

    /// An edge case: A `[m, k]`, W `[n, k]` (and packed), a bias, and the product by a kernel.
    struct Case {
        a: Vec<f32>,
        w: Vec<f32>,
        b: Vec<f32>,
        p: Bf16Panels,
        got: Vec<f32>,
    }

    /// The case of `seed` and `(m, k, n)` multiplied by `kernel` (outputs start as NaN so that
    /// a missed one shows).
    fn case(seed: u64, (m, k, n): (usize, usize, usize), kernel: Kernel) -> Case {
        let a = lcg(seed, m * k, 2.0);
        let w = lcg(seed + 1, n * k, 0.5);
        let b = lcg(seed + 3, n, 1.0);
        let p = panels(&w, n, k);
        let mut got = vec![f32::NAN; m * n];
        matmul(kernel, m, &a, k, &p, Some(&b), &mut got);
        Case { a, w, b, p, got }
    }

    /// Row `i` of A times row `j` of W, `k` long, in f64 on the bf16-rounded inputs, and the sum
    /// of the products' magnitudes (the scale of an f32 accumulation's error).
    fn exact_dot(a: &[f32], w: &[f32], i: usize, j: usize, k: usize) -> (f64, f64) {
        let r = |x: f32| f64::from(f32::from_bits(u32::from(to_bf16(x)) << 16));
        let prods = (0..k).map(|kk| r(a[i * k + kk]) * r(w[j * k + kk]));
        (prods.clone().sum(), prods.map(f64::abs).sum())
    }

    /// Each output is the documented chain (pairs in order, odd element first) plus the bias,
    /// for the edge sizes.
    #[test]
    fn matches_the_documented_chain() {
        for (m, k, n) in EDGES {
            let Case { a, w, b, got, .. } = case(1, (m, k, n), Kernel::Emulated);
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0f32;
                    for q in 0..k.div_ceil(2) {
                        let lo = |x: &[f32], r: usize, kk: usize| {
                            if kk < k {
                                u32::from(to_bf16(x[r * k + kk]))
                            } else {
                                0
                            }
                        };
                        let av = lo(&a, i, 2 * q) | (lo(&a, i, 2 * q + 1) << 16);
                        let wv = lo(&w, j, 2 * q) | (lo(&w, j, 2 * q + 1) << 16);
                        s = dot_pair(s, av, wv);
                    }
                    let want = s + b[j];
                    assert_eq!(
                        got[i * n + j].to_bits(),
                        want.to_bits(),
                        "{m}x{k}x{n} ({i},{j})"
                    );
                }
            }
        }
    }

    /// The `vdpbf16ps` kernel gives the scalar emulation's bits (where the CPU has it), for any
    /// thread count.
    #[test]
    fn native_kernel_and_threads_are_bit_identical() {
        let (m, k, n) = (301, 770, 200);
        let a = lcg(5, m * k, 3.0);
        let w = lcg(6, n * k, 0.2);
        let p = panels(&w, n, k);
        let mut want = vec![0f32; m * n];
        with_threads(1, || {
            matmul(Kernel::Emulated, m, &a, k, &p, None, &mut want)
        })
        .expect("pool");
        if !native() {
            aria_testing::skip_for_hardware("native part: this CPU has no AVX-512 BF16");
        }
        same_on_threads(Kernel::Native, m, &a, k, &p, None, &want, "vdpbf16ps");
    }

    /// Run `f` on a pool of `n` threads.
    fn with_threads<R: Send>(
        n: usize,
        f: impl FnOnce() -> R + Send,
    ) -> Result<R, rayon::ThreadPoolBuildError> {
        Ok(rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()?
            .install(f))
    }

    /// `kernel`'s product on 1, 2 and 3 threads has the bits of `want`.
    #[allow(clippy::too_many_arguments)]
    fn same_on_threads(
        kernel: Kernel,
        m: usize,
        a: &[f32],
        k: usize,
        p: &Bf16Panels,
        bias: Option<&[f32]>,
        want: &[f32],
        what: &str,
    ) {
        for t in [1, 2, 3] {
            let mut got = vec![0f32; want.len()];
            with_threads(t, || matmul(kernel, m, a, k, p, bias, &mut got)).expect("pool");
            let same = got
                .iter()
                .zip(want)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{what}: {t} threads");
        }
    }

    /// Close to the f64 product of the rounded inputs (f32 accumulation only), and the
    /// panels give back the rounded weight rows.
    #[test]
    fn accurate_and_rows_round_trip() {
        let (m, k, n) = (17, 2048, 40);
        let a = lcg(7, m * k, 1.0);
        let w = lcg(8, n * k, 1.0);
        let p = panels(&w, n, k);
        let mut got = vec![0f32; m * n];
        matmul(Kernel::Native, m, &a, k, &p, None, &mut got);
        let r = |x: f32| f64::from(f32::from_bits(u32::from(to_bf16(x)) << 16));
        let mut row = vec![0f32; k];
        for j in 0..n {
            p.row(j, &mut row);
            for kk in 0..k {
                assert_eq!(f64::from(row[kk]), r(w[j * k + kk]));
            }
        }
        for i in 0..m {
            for j in 0..n {
                let (exact, scale) = exact_dot(&a, &w, i, j, k);
                let err = (f64::from(got[i * n + j]) - exact).abs();
                assert!(err <= 1e-5 * scale, "({i},{j}) {err:e} of {scale:e}");
            }
        }
    }

    /// Under `CI=true` a CPU whose CPUID reports AMX-TILE and AMX-BF16 must get the tile unit:
    /// the OS refusing it (`arch_prctl(ARCH_REQ_XCOMP_PERM)`) fails there. Elsewhere the test
    /// then skips as on a CPU without AMX.
    fn fail_if_amx_refused_under_ci() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(
            !(ci && amx_in_cpuid() && !amx_available()),
            "CPUID reports AMX-TILE and AMX-BF16 but the OS refused the tile data state; \
             the AMX paths must run under CI=true"
        );
    }

    /// The AMX product (where the CPU has it): within f32 accumulation of the f64 product of
    /// the rounded inputs, with the bias, for edge sizes (odd K, K past a 16-pair tile, M and N
    /// not multiples of a tile or a task); the same bits for any thread count; close to the
    /// documented chain.
    #[test]
    fn amx_kernel_is_accurate_and_thread_invariant() {
        fail_if_amx_refused_under_ci();
        if !amx_available() {
            aria_testing::skip_for_hardware("this CPU (or OS) has no AMX-BF16 tile unit");
            return;
        }
        for (m, k, n) in EDGES.into_iter().chain([(301, 770, 200), (33, 2048, 17)]) {
            let Case { a, w, b, p, got } = case(11, (m, k, n), Kernel::Amx);
            let mut chain = vec![0f32; m * n];
            matmul(Kernel::Emulated, m, &a, k, &p, Some(&b), &mut chain);
            let mut differ = 0usize;
            for i in 0..m {
                for j in 0..n {
                    let (exact, scale) = exact_dot(&a, &w, i, j, k);
                    // The f32 accumulation bound of the other tests, plus the rounding of the
                    // bias addition (half an ulp of the output).
                    let (o, c) = (f64::from(got[i * n + j]), f64::from(chain[i * n + j]));
                    let half_ulp = |v: f64| 0.5 * f64::from(f32::EPSILON) * v.abs();
                    let err = (o - f64::from(b[j]) - exact).abs();
                    assert!(
                        err <= 1e-5 * scale + half_ulp(o),
                        "{m}x{k}x{n} ({i},{j}) {err:e} of {scale:e}"
                    );
                    // Both products are within that of the exact sum.
                    let d = (o - c).abs();
                    assert!(
                        d <= 2e-5 * scale + half_ulp(o) + half_ulp(c),
                        "{m}x{k}x{n} ({i},{j}) vs chain {d:e}"
                    );
                    differ += usize::from(got[i * n + j].to_bits() != chain[i * n + j].to_bits());
                }
            }
            eprintln!(
                "{m}x{k}x{n}: {differ} of {} outputs differ from the vdpbf16ps chain",
                m * n
            );
            let what = format!("AMX {m}x{k}x{n}");
            same_on_threads(Kernel::Amx, m, &a, k, &p, Some(&b), &got, &what);
        }
    }

    /// Without a bias, full 32 × 32 blocks are stored straight into C and edge blocks through
    /// the scratch: every output is the biased product less its bias (exactly: the same
    /// accumulation), and the new-vector entry gives the slice entry's bits.
    #[test]
    fn amx_direct_stores_and_new_vectors() {
        fail_if_amx_refused_under_ci();
        if !amx_available() {
            aria_testing::skip_for_hardware("this CPU (or OS) has no AMX-BF16 tile unit");
            return;
        }
        for (m, k, n) in [(64, 96, 64), (301, 770, 200), (32, 32, 48), (5, 40, 33)] {
            let Case { a, b, p, got, .. } = case(17, (m, k, n), Kernel::Amx);
            let mut plain = vec![f32::NAN; m * n];
            matmul(Kernel::Amx, m, &a, k, &p, None, &mut plain);
            let zero = vec![0f32; n];
            let mut zb = vec![f32::NAN; m * n];
            matmul(Kernel::Amx, m, &a, k, &p, Some(&zero), &mut zb);
            for (i, (x, z)) in plain.iter().zip(&zb).enumerate() {
                assert!(
                    x == z,
                    "{m}x{k}x{n} [{i}]: {x} without bias, {z} with zeros"
                );
            }
            let v = matmul_vec(Kernel::Amx, m, &a, k, &p, Some(&b));
            assert_eq!(v.len(), m * n);
            for (i, (x, y)) in v.iter().zip(&got).enumerate() {
                assert_eq!(x.to_bits(), y.to_bits(), "{m}x{k}x{n} [{i}]");
            }
            let v = matmul_vec(Kernel::Amx, m, &a, k, &p, None);
            for (i, (x, y)) in v.iter().zip(&plain).enumerate() {
                assert_eq!(x.to_bits(), y.to_bits(), "{m}x{k}x{n} [{i}] (no bias)");
            }
        }
    }
}
