//! CPU kernels: a scalar reference and runtime-dispatched SIMD paths (AVX2/FMA on x86-64, NEON on
//! aarch64), one file per ISA with the same function names. On x86-64 CPUs with AVX-512F an extra
//! path runs the matrix micro-kernel on 512-bit registers (other kernels are the AVX2 ones).
//!
//! [`Isa::detect`] picks the best path once per process; [`Isa::available`] lists every path this
//! machine can run, which the tests use to check each against [`scalar`]. [`with_isa`] runs a
//! closure with another path selected on the calling thread (ops read the selection when they
//! start, before handing work to the thread pool), so the same op can be run on every path.
//!
//! Every kernel keeps each reduction inside one call on one thread, so results never depend on
//! the thread count.

use std::cell::Cell;
use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
pub(crate) mod gemm;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
pub mod scalar;

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
            $crate::cpu::Isa::Avx2 => unsafe { $crate::cpu::avx2::$f($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx512` is only selected when AVX-512F, AVX2 and FMA were detected.
            $crate::cpu::Isa::Avx512 => unsafe { $crate::cpu::avx512::$f($($arg),*) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: `Isa::Neon` is only selected when NEON was detected at run time.
            $crate::cpu::Isa::Neon => unsafe { $crate::cpu::neon::$f($($arg),*) },
            _ => $crate::cpu::scalar::$f($($arg),*),
        }
    }};
}
pub(crate) use dispatch;

/// Panel width (columns) of the matrix micro-kernel on a path.
#[inline]
pub(crate) fn panel_width(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::NR,
        _ => scalar::NR,
    }
}

/// Rows of the matrix micro-kernel's register tile on a path (the most `gemm_tile` takes).
#[inline]
pub(crate) fn tile_rows(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::MR,
        _ => scalar::MR,
    }
}

/// Make sure an ISA value handed to a kernel can run here (a caller may construct any variant).
#[inline]
pub(crate) fn checked(isa: Isa) -> Isa {
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
pub(crate) mod rows {
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
}
