//! CPU kernels: a scalar reference and runtime-dispatched SIMD paths (AVX2/FMA on x86-64, NEON on
//! aarch64), one file per ISA with the same function names.
//!
//! [`Isa::detect`] picks the best path at run time; [`Isa::available`] lists every path this
//! machine can run, which the tests use to check each against [`scalar`].

pub mod scalar;

/// An instruction-set path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Portable Rust, the reference every other path is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA.
    Avx2,
    /// aarch64 NEON.
    Neon,
}

impl Isa {
    /// The best path this CPU supports.
    pub fn detect() -> Isa {
        *Self::available().last().unwrap_or(&Isa::Scalar)
    }

    /// Every path this CPU can run, scalar first.
    pub fn available() -> Vec<Isa> {
        vec![Isa::Scalar]
    }
}

/// Dot product of two f32 slices of one length.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    scalar::dot(a, b)
}
