//! Matrix kernels for packed weights: `y[M, N] = x[M, K] · Wᵀ` with `W [N, K]` packed.
//!
//! Two computations, chosen by the weight's [`Compute`] mode:
//! - **weight-only** ([`Kernel::Dequant`]): f32 activations, on the CPU backend's own f32
//!   product ([`crate::gemm`]) with B read through the packed rows: each KC slab of the
//!   columns a task packs is dequantized right before its micro-kernel consumes it (a product
//!   of more than 480 rows, three row blocks, packs the panels once for all of them while it runs,
//!   at most 64 MiB); no f32 copy of the weight is kept. The result is, bit for bit, the f32 product
//!   of the dequantized weight on the same path.
//! - **W8A8** ([`Kernel::W8A8`], `q8_0` only): activations are quantized per token
//!   (symmetric int8, see [`quantize_activations`]); each 32-block gives an exact int32 dot
//!   product, combined as `acc ← fma(isum, d_block, acc)` in block order, then `y = acc · s_row`.
//!   The int32 sums are identical on every path by construction, and so is `y`. The paths:
//!   scalar, AVX2, AVX-VNNI, AVX-512 VNNI, the AMX-INT8 tiles, NEON and NEON `sdot`.
//!
//! The path comes from an explicit [`KernelQuery`] through [`select`], an ordered ladder of
//! `try_*` fast paths ending in the scalar reference; nothing reads the environment. Work is
//! split over output columns (and row blocks) on the [`crate::threads`] pool, never inside
//! a sum, so results do not depend on the thread count.

mod dequant;
mod int8;
pub(crate) mod scalar;

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

pub use crate::Isa;
pub(crate) use dequant::{gemm_dequant, gemm_dequant_vec};
pub(crate) use int8::{gemm_w8a8, w8a8_block_sums};
pub use int8::{quantize_activations, QuantizedActs};

use std::sync::OnceLock;

use aria_tensor::format::WeightFormat;

use super::Compute;

/// A packed int8 weight panel for the W8A8 tiles: `nr` columns × `nblk` blocks of 32.
/// `q[((b·8 + k4)·nr + j)·4 + t]` is weight `32b + 4k4 + t` of column `j` (i8 bits); `d[b·nr + j]`
/// the block's scale and `corr[b·nr + j]` the value each block sum starts from, negated
/// (`128 · Σw` for paths with offset activations, 0 otherwise).
pub(crate) struct IntPanel<'a> {
    pub q: &'a [u8],
    pub d: &'a [f32],
    pub corr: &'a [i32],
    pub nblk: usize,
    pub nr: usize,
}

/// An int8 dot-product path for W8A8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntIsa {
    /// Portable Rust, the reference.
    Scalar,
    /// x86-64 AVX2 (`vpmaddubsw` + `vpmaddwd`, sign trick).
    Avx2,
    /// x86-64 AVX-VNNI (256-bit `vpdpbusd`).
    AvxVnni,
    /// x86-64 AVX-512 VNNI (512-bit `vpdpbusd`).
    Avx512Vnni,
    /// x86-64 AMX-INT8 tiles (`tdpbssd`, Linux granting the tile state), with AVX-512F.
    /// `q8_0`'s per-32 scales make each tile product K = 32, and its sums go through memory
    /// (one cache line a tile row) to be scaled by AVX-512.
    Amx,
    /// aarch64 NEON (widening multiplies).
    Neon,
    /// aarch64 NEON with the `dotprod` extension (`sdot`).
    NeonDot,
}

impl IntIsa {
    /// Every int8 path this CPU can run, scalar first, best last.
    pub fn available() -> Vec<IntIsa> {
        [
            IntIsa::Scalar,
            IntIsa::Neon,
            IntIsa::NeonDot,
            IntIsa::Avx2,
            IntIsa::AvxVnni,
            IntIsa::Avx512Vnni,
            IntIsa::Amx,
        ]
        .into_iter()
        .filter(|i| i.is_available())
        .collect()
    }

    /// Whether this CPU can run the path.
    pub fn is_available(self) -> bool {
        match self {
            IntIsa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            IntIsa::Avx2 => Isa::Avx2.is_available(),
            #[cfg(target_arch = "x86_64")]
            IntIsa::AvxVnni => {
                Isa::Avx2.is_available() && std::arch::is_x86_feature_detected!("avxvnni")
            }
            #[cfg(target_arch = "x86_64")]
            IntIsa::Avx512Vnni => {
                Isa::Avx512.is_available() && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "x86_64")]
            IntIsa::Amx => Isa::Avx512.is_available() && amx::available(),
            #[cfg(target_arch = "aarch64")]
            IntIsa::Neon => Isa::Neon.is_available(),
            #[cfg(target_arch = "aarch64")]
            IntIsa::NeonDot => {
                Isa::Neon.is_available() && std::arch::is_aarch64_feature_detected!("dotprod")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The best int8 path that goes with the f32 path `isa`: scalar stays scalar (so
    /// [`crate::with_isa`]`(Isa::Scalar, …)` selects every reference), AVX2 takes
    /// AVX-VNNI where present, AVX-512 takes the AMX tiles where present, else AVX-512 VNNI
    /// where present (else as AVX2), NEON
    /// takes `sdot` where present.
    pub fn for_isa(isa: Isa) -> IntIsa {
        static BEST: OnceLock<[IntIsa; 4]> = OnceLock::new();
        let pick = |c: &[IntIsa]| {
            c.iter()
                .copied()
                .find(|i| i.is_available())
                .unwrap_or(IntIsa::Scalar)
        };
        let best = BEST.get_or_init(|| {
            [
                IntIsa::Scalar,
                pick(&[IntIsa::AvxVnni, IntIsa::Avx2]),
                pick(&[
                    IntIsa::Amx,
                    IntIsa::Avx512Vnni,
                    IntIsa::AvxVnni,
                    IntIsa::Avx2,
                ]),
                pick(&[IntIsa::NeonDot, IntIsa::Neon]),
            ]
        });
        match isa {
            Isa::Avx2 => best[1],
            Isa::Avx512 => best[2],
            Isa::Neon => best[3],
            _ => best[0],
        }
    }

    /// A short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            IntIsa::Scalar => "scalar",
            IntIsa::Avx2 => "avx2",
            IntIsa::AvxVnni => "avx-vnni",
            IntIsa::Avx512Vnni => "avx512-vnni",
            IntIsa::Amx => "amx-int8",
            IntIsa::Neon => "neon",
            IntIsa::NeonDot => "neon-dotprod",
        }
    }

    /// Whether the path takes activations offset by +128 (unsigned × signed `vpdpbusd`).
    pub(crate) fn offset_acts(self) -> bool {
        matches!(self, IntIsa::AvxVnni | IntIsa::Avx512Vnni)
    }

    /// Panel width of the int8 tile.
    pub(crate) fn panel_width(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            IntIsa::Avx512Vnni => avx512::INR,
            #[cfg(target_arch = "x86_64")]
            IntIsa::Amx => amx::INR,
            _ => scalar::INR,
        }
    }

    /// Most rows of one int8 tile.
    pub(crate) fn tile_rows(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            IntIsa::Avx512Vnni => avx512::IMR,
            #[cfg(target_arch = "x86_64")]
            IntIsa::Amx => amx::IMR,
            _ => scalar::IMR,
        }
    }

    /// `self` if this CPU runs it, else scalar.
    pub(crate) fn checked(self) -> IntIsa {
        if self.is_available() {
            self
        } else {
            IntIsa::Scalar
        }
    }
}

/// `isa` if this CPU runs it, else scalar.
pub(crate) fn checked(isa: Isa) -> Isa {
    if isa.is_available() {
        isa
    } else {
        Isa::Scalar
    }
}

/// What an int8 path needs set up on the thread for its tiles (the AMX tile configuration),
/// held for the duration of a task.
pub(crate) struct TileScope {
    #[cfg(target_arch = "x86_64")]
    _amx: Option<amx::Tiles>,
}

impl TileScope {
    /// Set up `isa` (which must come from [`IntIsa::checked`]) on this thread.
    pub(crate) fn enter(isa: IntIsa) -> TileScope {
        #[cfg(not(target_arch = "x86_64"))]
        let _ = isa;
        TileScope {
            #[cfg(target_arch = "x86_64")]
            _amx: (isa == IntIsa::Amx).then(amx::Tiles::configure),
        }
    }
}

/// The int8 tile on `isa` (which must come from [`IntIsa::checked`]), inside a
/// [`TileScope`] of it.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn tile_i8(
    isa: IntIsa,
    mr: usize,
    a: &[u8],
    lda: usize,
    w: &IntPanel<'_>,
    c: &mut [f32],
    ldc: usize,
    nc: usize,
    raw: Option<(&mut [i32], usize)>,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` only keeps AVX2 when AVX2 and FMA were detected.
        IntIsa::Avx2 => unsafe { avx2::tile_i8(mr, a, lda, w, c, ldc, nc, raw) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` only keeps AVX-VNNI when AVX2, FMA and AVX-VNNI were detected.
        IntIsa::AvxVnni => unsafe { avx2::tile_i8_vnni(mr, a, lda, w, c, ldc, nc, raw) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` only keeps AVX-512 VNNI when AVX-512F and AVX-512 VNNI were
        // detected.
        IntIsa::Avx512Vnni => unsafe { avx512::tile_i8(mr, a, lda, w, c, ldc, nc, raw) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `checked` only keeps AMX where the tiles are granted; every caller of
        // `tile_i8` (the W8A8 tasks) holds a `TileScope` of the path on this thread.
        IntIsa::Amx => unsafe { amx::tile_i8(mr, a, lda, w, c, ldc, nc, raw) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `checked` only keeps NEON when NEON was detected.
        IntIsa::Neon => unsafe { neon::tile_i8(mr, a, lda, w, c, ldc, nc, raw) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `checked` only keeps NEON-dotprod when NEON and dotprod were detected.
        IntIsa::NeonDot => unsafe { neon::tile_i8_dot(mr, a, lda, w, c, ldc, nc, raw) },
        _ => scalar::tile_i8(mr, a, lda, w, c, ldc, nc, raw),
    }
}

/// The kernel a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// f32 activations, weights dequantized into panels, f32 tile on this path.
    Dequant(Isa),
    /// Per-token int8 activations × `q8_0` weights on this int8 path.
    W8A8(IntIsa),
}

impl Kernel {
    /// A short name (`dequant/avx2`, `w8a8/avx512-vnni`).
    pub fn name(self) -> String {
        match self {
            Kernel::Dequant(i) => format!("dequant/{}", i.name()),
            Kernel::W8A8(i) => format!("w8a8/{}", i.name()),
        }
    }

    /// Whether this is a SIMD path (not a scalar reference).
    pub fn is_optimized(self) -> bool {
        !matches!(
            self,
            Kernel::Dequant(Isa::Scalar) | Kernel::W8A8(IntIsa::Scalar)
        )
    }
}

/// Everything kernel selection depends on: explicit values only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelQuery {
    /// The weight's format.
    pub format: WeightFormat,
    /// The weight's compute mode.
    pub compute: Compute,
    /// The f32 path (usually [`crate::current`]).
    pub isa: Isa,
    /// The int8 path (usually [`IntIsa::for_isa`] of `isa`).
    pub int_isa: IntIsa,
    /// Activation rows.
    pub m: usize,
    /// Output columns (weight rows).
    pub n: usize,
    /// Reduction length (weight columns).
    pub k: usize,
}

impl KernelQuery {
    /// The query for a product on the paths selected for the calling thread.
    pub fn current(format: WeightFormat, compute: Compute, m: usize, n: usize, k: usize) -> Self {
        let isa = crate::current();
        KernelQuery {
            format,
            compute,
            isa,
            int_isa: IntIsa::for_isa(isa),
            m,
            n,
            k,
        }
    }
}

/// W8A8 on a SIMD int8 path: the mode asks for it, the format is `q8_0` and the path runs here.
pub fn try_w8a8_simd(q: &KernelQuery) -> Option<Kernel> {
    (q.compute == Compute::W8A8
        && q.format == WeightFormat::Q8_0
        && q.int_isa != IntIsa::Scalar
        && q.int_isa.is_available())
    .then_some(Kernel::W8A8(q.int_isa))
}

/// Weight-only on a SIMD f32 path that runs here.
pub fn try_dequant_simd(q: &KernelQuery) -> Option<Kernel> {
    (q.compute == Compute::WeightOnly && q.isa != Isa::Scalar && q.isa.is_available())
        .then_some(Kernel::Dequant(q.isa))
}

/// Pick the kernel: the `try_*` fast paths in order, then the scalar reference of the mode
/// (the mode fixes what is computed; the ladder only picks how). A pure function of the query.
pub fn select(q: &KernelQuery) -> Kernel {
    try_w8a8_simd(q)
        .or_else(|| try_dequant_simd(q))
        .unwrap_or(match q.compute {
            Compute::W8A8 => Kernel::W8A8(IntIsa::Scalar),
            Compute::WeightOnly => Kernel::Dequant(Isa::Scalar),
        })
}

/// Output columns per task: the widest of 128/64/32 (at least one panel) that still gives
/// every thread two tasks. Blocking never changes a result bit.
pub(crate) fn col_block(n: usize, row_blocks: usize, nr: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    for nb in [128, 64, 32] {
        if nb >= nr && n.div_ceil(nb) * row_blocks >= 2 * threads {
            return nb;
        }
    }
    nr.max(32)
}

/// Rows per task: all of them up to 512 (each weight panel is then dequantized once per
/// call), else blocks of 256.
pub(crate) fn row_block(m: usize) -> usize {
    if m <= 512 {
        m.max(1)
    } else {
        256
    }
}
