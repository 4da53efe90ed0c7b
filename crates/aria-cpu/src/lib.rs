//! # aria-cpu
//!
//! The CPU backend of aria: [`Cpu`], an implementation of the op contract's `Backend` trait
//! (`aria-tensor`) like the wgpu and CUDA backends, which `aria-core`'s ops hand every op whose
//! operands are host tensors. [`host`] holds each op's CPU body (the operands' elements as
//! slices into one kernel; [`host::run`] is the op set's CPU reference) and [`threads`] the
//! pools they run in. Below them are the kernels, on plain slices (no tensors, no allocation
//! policy), which any other code can call directly.
//!
//! Besides the per-ISA kernels, every op of the set has its kernel here, as a function of
//! slices and sizes: [`attention`] (plain, masked, banded, differential; and on the AMX unit),
//! [`fused`] (the DiT's and the samplers' fused row ops, SAME's head split), [`rowwise`]
//! (element-wise, broadcast, softmax, embedding rows, RoPE, the norms), [`layout`] (unfold,
//! masked-row fill), [`products`] (batched matmul, convolution), [`torch_bf16`] (PyTorch's bf16
//! CPU arithmetic, bit for bit), with [`gemm`] and [`bf16dot`] for the products and [`quant`]
//! for the products with packed block formats. A body splits
//! its work over the rayon pool it is called on and reads the selected ISA path once, when it
//! starts.
//!
//! CPU kernels: a scalar reference and runtime-dispatched SIMD paths (AVX2/FMA on x86-64, NEON on
//! aarch64), one file per ISA with the same function names. On x86-64 CPUs with AVX-512F an extra
//! path runs the matrix micro-kernel and the element-wise row kernels on 512-bit registers (the
//! reductions are the AVX2 ones).
//!
//! [`Isa::detect`] picks the best path once per process; [`Isa::available`] lists every path this
//! machine can run, which the tests use to check each against [`scalar`]. [`with_isa`] runs a
//! closure with another path selected on the calling thread (ops read the selection when they
//! start, before handing work to the thread pool), so the same op can be run on every path.
//!
//! Every kernel keeps each reduction inside one call on one thread, so results never depend on
//! the thread count.
//!
//! ```
//! use aria_cpu::{dot, with_isa, Isa};
//! let (a, b) = (vec![0.5f32; 100], vec![2.0f32; 100]);
//! // The best path of this CPU, then every path it can run: each gives the scalar result here.
//! let best = dot(&a, &b);
//! for isa in Isa::available() {
//!     assert_eq!(with_isa(isa, || dot(&a, &b)), best);
//! }
//! println!("{best} on {:?}", Isa::detect());
//! ```
//!
//! # Which ops have per-ISA kernels
//!
//! The fused row kernels are written once over a small vector trait (`simd::Simd`: `f32`, AVX2
//! `__m256`, AVX-512 `__m512`, NEON `float32x4_t`) and named identically in `scalar`, `avx2`,
//! `avx512` and `neon`; the 16-lane vector computes each lane with the AVX2 operations, so the
//! element-wise kernels give the AVX2 bits on AVX-512 (tested). The matrix micro-kernel, `dot`,
//! the reductions, `exp`, SiLU/sigmoid/SwiGLU and DyT are hand-written per ISA; on AVX-512,
//! `exp_sub_sum` and `swiglu` run 16 lanes with the AVX2 kernels' operations, so they give the
//! AVX2 bits, and the reductions are the AVX2 ones.
//!
//! | op | kernels | paths vs scalar |
//! |---|---|---|
//! | `linear`, `matmul`, `conv1d`, `attention` (incl. differential, banded, chunked) | `gemm_tile`, `dot` | within 2e-6 (FMA, blocked sums) |
//! | `linear_packed`, `q8_0`/`q4_k`/`q6_k` weight-only ([`quant`]) | the f32 product reading B through the blocks, decoded in registers | bit-identical to the f32 product of the dequantized weight on the same path |
//! | `linear_packed`, `q8_0` W8A8 ([`quant`]) | int8 tiles: AMX-INT8, AVX-512 VNNI, AVX-VNNI, AVX2, NEON `sdot`, NEON | bit-identical (exact int32 block sums) |
//! | `linear_packed`, `bf16_panels` (bf16 inputs, f32 accumulation) | [`bf16dot`]: `vdpbf16ps` (AVX-512 BF16) or its scalar emulation | bit-identical |
//! | the same products on the AMX tile unit ([`bf16dot::Kernel::Amx`], AMX-BF16) | `tdpbf16ps` | the unit's own rounding; within f32 accumulation of f64 |
//! | `aria_core::ops::attention_amx`: the score and value products of a head on the AMX unit (bf16 q, k, p, v) | `tdpbf16ps` (`amx_attn`) | the unit's own rounding; within one bf16 step of the probabilities of f64 |
//! | `softmax_last`, attention probabilities | `max`, `exp_sub_sum`, `scale` | within 1e-6 |
//! | attention logit soft-capping | `softcap` | vector `tanh`, 3 ulp |
//! | `rms_norm`, `rms_norm_modulate`, `split_heads` QK-norm | `sumsq` + `norm_gain`, `norm_gain1p`, `norm_gain_modulate` | per element bit-identical; the sum of squares is blocked per path |
//! | `layer_norm` | `sum`, `sumsq_dev` + `layer_norm_row` | as above |
//! | `gated_residual_add` | `add_mul_to`, `add_to` | bit-identical |
//! | `rope`, `split_heads`/`qkv_heads` RoPE | `rope_half` | bit-identical |
//! | `axpby` | `axpby` | bit-identical |
//! | `affine`, `add_scalar`, `mul_scalar` | `affine`, `scale` | bit-identical |
//! | `silu`, `sigmoid`, `glu` (SwiGLU) | `silu`, `sigmoid`, `swiglu` | within 1e-6 |
//! | `gelu`, `gelu_tanh`, `glu` (GeGLU) | `gelu`, `gelu_tanh`, `geglu`, `geglu_tanh` | erf: A&S 7.1.26 (2e-7 absolute); tanh: 3 ulp |
//! | `sin_pi`, `glu` (sin gate of SAME-L) | `sin_pi`, `sin_pi_glu` | three-part π reduction, ≤ 1.2e-7 absolute |
//! | `dyt`, `qkv_heads` DyT QK-norm | `dyt` | vector `tanh`, 3 ulp |
//!
//! The B panels of the matrix product are packed from `[N, K]` weights through register-block
//! transposes (`cpu::transpose`: 16 × 16 on AVX-512F, 8 × 8 on AVX2; the same values in the same
//! places as the portable loop). Portable on purpose (one kernel for every path): the other
//! pure data movement (`split_heads` without norm, `merge_heads`, `pad`, `fill_masked_rows`,
//! layout copies: `copy_from_slice`);
//! `tanh` (the codec's soft clip is pinned to `f32::tanh`); `std_last` (sequential f32 sums, as
//! documented); `apg_guidance` (f64 reductions in element order define its bits);
//! `fourier_features` and the RoPE tables (correctly rounded f64 sine/cosine). Every
//! transcendental kernel sends a row's tail through the same vector code on a padded buffer, so
//! an element's bits never depend on where its row or chunk starts (windowed decoding relies on
//! this).

use std::cell::Cell;
use std::sync::OnceLock;

pub mod aligned;
#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
pub mod amx_attn;
#[cfg(target_arch = "x86_64")]
pub mod amx_peak;
pub mod attention;
#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
pub mod avx512;
mod backend;
pub mod bf16dot;
pub mod fused;
pub mod gemm;
pub mod host;
pub mod kernels;
pub mod layout;
#[cfg(target_arch = "aarch64")]
pub mod neon;
#[cfg(target_arch = "x86_64")]
mod prefetch;
pub mod products;
pub mod quant;
pub mod rowwise;
pub mod scalar;
pub mod simd;
pub mod threads;
pub mod torch_bf16;
pub mod transpose;

pub use backend::{run_checked_host, Cpu};

/// An instruction-set path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable Rust, the reference every other path is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA.
    Avx2,
    /// x86-64 AVX-512F (with AVX2 + FMA): the matrix micro-kernel works on 512-bit registers,
    /// every other kernel is the AVX2 one.
    Avx512,
    /// aarch64 NEON.
    Neon,
}

static DETECTED: OnceLock<Isa> = OnceLock::new();

thread_local! {
    static OVERRIDE: Cell<Option<Isa>> = const { Cell::new(None) };
}

impl Isa {
    /// The best path this CPU supports (detected once, then cached).
    pub fn detect() -> Isa {
        *DETECTED.get_or_init(|| *Self::available().last().unwrap_or(&Isa::Scalar))
    }

    /// Every path this CPU can run, scalar first.
    pub fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            v.push(Isa::Avx2);
            if std::arch::is_x86_feature_detected!("avx512f") {
                v.push(Isa::Avx512);
            }
        }
        #[cfg(target_arch = "aarch64")]
        if std::arch::is_aarch64_feature_detected!("neon") {
            v.push(Isa::Neon);
        }
        v
    }

    /// Whether this CPU can run the path.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_available() && std::arch::is_x86_feature_detected!("avx512f")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// A short lowercase name ("scalar", "avx2", "neon").
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }
}

/// The lane masks of the first `n` of 32 f32 (or i32) held in two 16-lane vectors: all lanes
/// of both from `n ≥ 32`, none of the second below 17 (for masked AVX-512 loads and stores).
pub fn lane_masks32(n: usize) -> [u16; 2] {
    let m = |k: usize| {
        if k >= 16 {
            0xffff
        } else {
            ((1u32 << k) - 1) as u16
        }
    };
    [m(n.min(32)), m(n.saturating_sub(16).min(16))]
}

/// The path ops started on this thread use: the one set by an enclosing [`with_isa`], else
/// [`Isa::detect`].
pub fn current() -> Isa {
    OVERRIDE.with(|o| o.get()).unwrap_or_else(Isa::detect)
}

/// Run `f` with `isa` selected for the ops it starts on this thread (restored afterwards, also on
/// unwinding). A path this CPU cannot run is replaced by [`Isa::Scalar`].
pub fn with_isa<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Isa>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0;
            OVERRIDE.with(|o| o.set(prev));
        }
    }
    let isa = if isa.is_available() { isa } else { Isa::Scalar };
    let _restore = Restore(OVERRIDE.with(|o| o.replace(Some(isa))));
    f()
}

/// Dispatch a kernel call to the module of the given ISA. The ISA value must come from
/// [`current`] (which only yields paths this CPU runs).
macro_rules! dispatch {
    ($isa:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        match $isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx2` is only selected when AVX2 and FMA were detected at run time.
            $crate::Isa::Avx2 => unsafe { $crate::avx2::$f($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx512` is only selected when AVX-512F, AVX2 and FMA were detected.
            $crate::Isa::Avx512 => unsafe { $crate::avx512::$f($($arg),*) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: `Isa::Neon` is only selected when NEON was detected at run time.
            $crate::Isa::Neon => unsafe { $crate::neon::$f($($arg),*) },
            _ => $crate::scalar::$f($($arg),*),
        }
    }};
}
pub(crate) use dispatch;

/// Panel width (columns) of the matrix micro-kernel on a path.
#[inline]
pub fn panel_width(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::NR,
        _ => scalar::NR,
    }
}

/// Rows of the matrix micro-kernel's register tile on a path (the most `gemm_tile` takes).
#[inline]
pub fn tile_rows(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::MR,
        _ => scalar::MR,
    }
}

/// Make sure an ISA value handed to a kernel can run here (a caller may construct any variant).
#[inline]
pub fn checked(isa: Isa) -> Isa {
    match isa {
        _ if isa.is_available() => isa,
        _ => Isa::Scalar,
    }
}

/// Dot product of two f32 slices (the shorter length counts), on the [`current`] path.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_on(current(), a, b)
}

/// Dot product on an explicit path (a path this CPU cannot run falls back to scalar).
pub fn dot_on(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    dispatch!(checked(isa), dot(a, b))
}

/// Dynamic tanh of one row, `o ← γ ⊙ tanh(α·x) + β` (the shortest length counts), on the
/// [`current`] path. The vector paths compute `tanh` with a polynomial/exponential split within
/// 3 ulp of the correctly rounded value and fuse the final multiply-add; the scalar path uses
/// `f32::tanh` and is the reference.
#[inline]
pub fn dyt(o: &mut [f32], x: &[f32], alpha: f32, gamma: &[f32], beta: &[f32]) {
    dyt_on(current(), o, x, alpha, gamma, beta)
}

/// [`dyt`] on an explicit path (a path this CPU cannot run falls back to scalar).
pub fn dyt_on(isa: Isa, o: &mut [f32], x: &[f32], alpha: f32, gamma: &[f32], beta: &[f32]) {
    dispatch!(checked(isa), dyt(o, x, alpha, gamma, beta))
}

/// Row kernels used by the ops (reductions and activations over one contiguous slice).
pub mod rows {
    use super::Isa;

    /// Maximum (−∞ for an empty slice).
    pub fn max(isa: Isa, x: &[f32]) -> f32 {
        dispatch!(isa, max(x))
    }
    /// Sum.
    pub fn sum(isa: Isa, x: &[f32]) -> f32 {
        dispatch!(isa, sum(x))
    }
    /// Sum of squares.
    pub fn sumsq(isa: Isa, x: &[f32]) -> f32 {
        dispatch!(isa, sumsq(x))
    }
    /// Sum of squared deviations from `m`.
    pub fn sumsq_dev(isa: Isa, x: &[f32], m: f32) -> f32 {
        dispatch!(isa, sumsq_dev(x, m))
    }
    /// `x ← exp(x − m)`, returning the sum of the new values.
    pub fn exp_sub_sum(isa: Isa, x: &mut [f32], m: f32) -> f32 {
        dispatch!(isa, exp_sub_sum(x, m))
    }
    /// `x ← x · s`.
    pub fn scale(isa: Isa, x: &mut [f32], s: f32) {
        dispatch!(isa, scale(x, s))
    }
    /// `x ← x · sigmoid(x)`.
    pub fn silu(isa: Isa, x: &mut [f32]) {
        dispatch!(isa, silu(x))
    }
    /// `x ← sigmoid(x)`.
    pub fn sigmoid(isa: Isa, x: &mut [f32]) {
        dispatch!(isa, sigmoid(x))
    }
    /// `o ← v · silu(g)`.
    pub fn swiglu(isa: Isa, o: &mut [f32], v: &[f32], g: &[f32]) {
        dispatch!(isa, swiglu(o, v, g))
    }
    /// `o ← x·inv·γ`.
    pub fn norm_gain(isa: Isa, o: &mut [f32], x: &[f32], inv: f32, g: &[f32]) {
        dispatch!(isa, norm_gain(o, x, inv, g))
    }
    /// `o ← x·inv·(1 + γ)`.
    pub fn norm_gain1p(isa: Isa, o: &mut [f32], x: &[f32], inv: f32, g: &[f32]) {
        dispatch!(isa, norm_gain1p(o, x, inv, g))
    }
    /// `o ← (x·inv·γ)·(1 + sc) + sh`.
    pub fn norm_gain_modulate(
        isa: Isa,
        o: &mut [f32],
        x: &[f32],
        inv: f32,
        g: &[f32],
        sc: &[f32],
        sh: &[f32],
    ) {
        dispatch!(isa, norm_gain_modulate(o, x, inv, g, sc, sh))
    }
    /// `x ← (x − mean)·inv`, then `·w` and `+ b` where given.
    pub fn layer_norm_row(
        isa: Isa,
        x: &mut [f32],
        mean: f32,
        inv: f32,
        w: Option<&[f32]>,
        b: Option<&[f32]>,
    ) {
        dispatch!(isa, layer_norm_row(x, mean, inv, w, b))
    }
    /// `h ← h + u`.
    pub fn add_to(isa: Isa, h: &mut [f32], u: &[f32]) {
        dispatch!(isa, add_to(h, u))
    }
    /// `h ← h + u·g`.
    pub fn add_mul_to(isa: Isa, h: &mut [f32], u: &[f32], g: &[f32]) {
        dispatch!(isa, add_mul_to(h, u, g))
    }
    /// `o ← a·x + b·y`.
    pub fn axpby(isa: Isa, o: &mut [f32], a: f32, x: &[f32], b: f32, y: &[f32]) {
        dispatch!(isa, axpby(o, a, x, b, y))
    }
    /// Rotate-half rotary embedding of one row on its first `c.len()` dims.
    pub fn rope_half(isa: Isa, x: &mut [f32], c: &[f32], s: &[f32]) {
        dispatch!(isa, rope_half(x, c, s))
    }
    /// `x ← x·a + b`.
    pub fn affine(isa: Isa, x: &mut [f32], a: f32, b: f32) {
        dispatch!(isa, affine(x, a, b))
    }
    /// `x ← cap·tanh(x / cap)`.
    pub fn softcap(isa: Isa, x: &mut [f32], cap: f32) {
        dispatch!(isa, softcap(x, cap))
    }
    /// `x ← sin(π·x)`.
    pub fn sin_pi(isa: Isa, x: &mut [f32]) {
        dispatch!(isa, sin_pi(x))
    }
    /// `x ← gelu(x)` (erf form).
    pub fn gelu(isa: Isa, x: &mut [f32]) {
        dispatch!(isa, gelu(x))
    }
    /// `x ← gelu_tanh(x)`.
    pub fn gelu_tanh(isa: Isa, x: &mut [f32]) {
        dispatch!(isa, gelu_tanh(x))
    }
    /// `o ← v·gelu(g)`.
    pub fn geglu(isa: Isa, o: &mut [f32], v: &[f32], g: &[f32]) {
        dispatch!(isa, geglu(o, v, g))
    }
    /// `o ← v·gelu_tanh(g)`.
    pub fn geglu_tanh(isa: Isa, o: &mut [f32], v: &[f32], g: &[f32]) {
        dispatch!(isa, geglu_tanh(o, v, g))
    }
    /// `o ← v·sin(π·g)`.
    pub fn sin_pi_glu(isa: Isa, o: &mut [f32], v: &[f32], g: &[f32]) {
        dispatch!(isa, sin_pi_glu(o, v, g))
    }
}
