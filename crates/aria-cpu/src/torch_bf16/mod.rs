//! PyTorch's bf16 CPU arithmetic, reproduced bit for bit on f32 tensors that hold bf16 values.
//!
//! A model run in bf16 by PyTorch rounds every op's result to bf16, and the *order* in which its
//! kernels add f32 partial results decides which way a value near a rounding boundary goes.
//! With random (or merely sensitive) weights one flipped ulp early in a network spreads to half
//! of its outputs, so a faithful replay needs the orders too. These are the orders of PyTorch
//! 2.7's ATen kernels on an AVX2 CPU (8 f32 lanes per register) when oneDNN does not take the
//! bf16 matrix products (it does on AVX-512 machines, with other orders):
//!
//! * [`dot`]: the reduced-precision `gemm` dot product (`dot_with_fp32_arith`): 8 registers × 8
//!   lanes over 64-element blocks, a register tree, a lane tree, then the tails; [`linear`]
//!   runs it for every output, tiled so the 64 partial sums stay in registers;
//! * [`seq_dot`]: the left-to-right products of the CPU flash-attention kernel;
//! * [`sum`]: the vectorised `sum` reduction (`cascade_sum`), as `mean` uses it;
//! * [`exp_u20`]: the flash-attention softmax's fast exponential.
//!
//! Products of two bf16 values are exact in f32, so a fused multiply-add and a multiply followed
//! by an add give the same result here; only the additions round.
//!
//! These are the kernels, on slices; `aria_core::ops::torch_bf16` runs them on CPU tensors as
//! the `torch_bf16_*` ops of the set (a device backend implements the same ops its own way).

use half::bf16;

mod elementwise;
mod flash;
mod linear;

pub use elementwise::{gelu_tanh, gelu_tanh_value, rms_norm_rows, rope_rows, tanh};
pub use flash::{flash_attention, flash_softmax_row, FlashDims, FLASH_KV_BLOCK};
pub use linear::linear;

/// f32 lanes of one AVX2 register (`Vectorized<float>`), the width the orders are defined by.
pub const LANES: usize = 8;
/// Elements of one main-loop block of [`dot`] (8 registers of [`LANES`]).
pub(crate) const BLOCK: usize = 64;

/// Round an f32 to the nearest bf16 (ties to even), returned widened.
#[inline]
pub fn round(v: f32) -> f32 {
    bf16::from_f32(v).to_f32()
}

/// `dst[l] += src[l]` lane by lane (one vector add).
#[inline(always)]
fn add_lanes(dst: &mut [f32; LANES], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

/// `vec_reduce_all(+)` of one AVX2 register: swap 128-bit halves, then 64-bit pairs, then
/// neighbours, adding each time; the result is `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`.
#[inline(always)]
pub fn lanes_sum(v: &[f32; LANES]) -> f32 {
    let a = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (a[0] + a[2]) + (a[1] + a[3])
}

/// The register tree of [`dot`] over the 64 partial sums of the main loop (register `r` holds
/// elements `8r..8r+8` of every block): 8 → 4 → 2 → 1 registers, then the lanes.
#[inline(always)]
fn block_tree(p: &[f32; BLOCK]) -> f32 {
    let mut h = [0f32; 32];
    for (i, v) in h.iter_mut().enumerate() {
        *v = p[i] + p[i + 32];
    }
    let mut q = [0f32; 16];
    for (i, v) in q.iter_mut().enumerate() {
        *v = h[i] + h[i + 16];
    }
    let mut r = [0f32; LANES];
    for (i, v) in r.iter_mut().enumerate() {
        *v = q[i] + q[i + LANES];
    }
    lanes_sum(&r)
}

/// The tails of [`dot`] after the main loop's sum `main_sum`: whole 16-element vectors into one
/// more register (reduced and added, zero when there are none), then the last elements one by
/// one.
#[inline(always)]
fn tails(a: &[f32], b: &[f32], main_sum: f32) -> f32 {
    let k = a.len().min(b.len());
    let main = k & !(BLOCK - 1);
    if main == k {
        // The empty tail register still adds its zero (−0 becomes +0).
        return main_sum + 0.0;
    }
    let vec_end = k & !(2 * LANES - 1);
    let mut tail = [0f32; LANES];
    let mut j = main;
    while j < vec_end {
        for half in [j, j + LANES] {
            for (l, t) in tail.iter_mut().enumerate() {
                *t += a[half + l] * b[half + l];
            }
        }
        j += 2 * LANES;
    }
    let mut sum = main_sum + lanes_sum(&tail);
    for j in vec_end..k {
        sum += a[j] * b[j];
    }
    sum
}

/// The dot product of ATen's reduced-precision `gemm` (`dot_with_fp32_arith`): 8 registers of 8
/// lanes accumulate 64-element blocks, the registers are added as a tree (8 → 4 → 2 → 1) and
/// then the lanes; a remainder of whole 16-element vectors goes to one more register, the
/// last elements are added one by one.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let k = a.len().min(b.len());
    let main = k & !(BLOCK - 1);
    let mut acc = [0f32; BLOCK];
    for (ca, cb) in a[..main]
        .chunks_exact(BLOCK)
        .zip(b[..main].chunks_exact(BLOCK))
    {
        for ((s, x), y) in acc.iter_mut().zip(ca).zip(cb) {
            *s += x * y;
        }
    }
    tails(&a[..k], &b[..k], block_tree(&acc))
}

/// A plain left-to-right dot product (the order of the flash-attention kernel's products).
pub fn seq_dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |s, (x, y)| s + x * y)
}

/// The f32 sum of a contiguous row as PyTorch's vectorised `sum` reduces it (`cascade_sum` on
/// AVX2): 8-lane vectors, four interleaved accumulators over groups of four vectors, summed
/// through a four-level cascade, then the leftover vectors, the accumulators in order, the
/// scalar tail and finally the lanes one by one.
pub fn sum(x: &[f32]) -> f32 {
    let nvec = x.len() / LANES;
    let vecs = |i: usize| -> &[f32] { &x[i * LANES..(i + 1) * LANES] };
    let groups = nvec / 4;
    let ceil_log2 = |n: usize| -> u32 {
        if n <= 1 {
            0
        } else {
            usize::BITS - (n - 1).leading_zeros()
        }
    };
    let power = 4u32.max(ceil_log2(groups) / 4);
    let step = 1usize << power;
    let mask = step - 1;
    let mut acc = [[[0f32; LANES]; 4]; 4];
    let add_group = |a: &mut [[f32; LANES]; 4], g: usize| {
        for (r, row) in a.iter_mut().enumerate() {
            add_lanes(row, vecs(4 * g + r));
        }
    };
    let mut i = 0;
    while i + step <= groups {
        for _ in 0..step {
            add_group(&mut acc[0], i);
            i += 1;
        }
        for j in 1..4 {
            let (lo, hi) = acc.split_at_mut(j);
            for (d, s) in hi[0].iter_mut().zip(lo[j - 1].iter_mut()) {
                add_lanes(d, s);
                *s = [0.0; LANES];
            }
            if i & (mask << (j as u32 * power)) != 0 {
                break;
            }
        }
    }
    while i < groups {
        add_group(&mut acc[0], i);
        i += 1;
    }
    let mut ps = acc[0];
    for lvl in acc.iter().skip(1) {
        for (d, s) in ps.iter_mut().zip(lvl) {
            add_lanes(d, s);
        }
    }
    let (first, rest) = ps.split_at_mut(1);
    for g in groups * 4..nvec {
        add_lanes(&mut first[0], vecs(g));
    }
    for r in rest.iter() {
        add_lanes(&mut first[0], r);
    }
    let mut total = 0f32;
    for &v in &x[nvec * LANES..] {
        total += v;
    }
    for v in first[0] {
        total += v;
    }
    total
}

/// PyTorch's vectorised `exp_u20` (AVX2 / AVX-512 `Vectorized<float>`), the exponential of its
/// CPU flash-attention softmax: a degree-5 polynomial on `x − n·ln2` scaled by `2ⁿ`, accurate to
/// about 20 ulp. Reproduced operation by operation (each `mul_add` is one fused multiply-add of
/// the original).
#[inline(always)]
pub fn exp_u20(x: f32) -> f32 {
    const F1: f32 = 0.999_999_7;
    const F2: f32 = 0.499_991_5;
    const F3: f32 = 0.166_676_52;
    const F4: f32 = 0.041_897_822;
    const F5: f32 = 0.008_289_291;
    let log2e = f32::from_bits(0x3fb8_aa3b);
    let ln2 = f32::from_bits(0x3f31_7218);
    let ln_min = f32::from_bits(0xc2ae_ac50);
    let ln_max = f32::from_bits(0x42b1_7218);
    let underflow = x < ln_min;
    let src = x.min(ln_max).max(ln_min);
    let fx = src.mul_add(log2e, 0.5).floor();
    let r = (-fx).mul_add(ln2, src);
    let mut p = r.mul_add(F5, F4);
    p = r.mul_add(p, F3);
    p = r.mul_add(p, F2);
    p = r.mul_add(p, F1);
    p = r.mul_add(p, 1.0);
    let pow = if underflow {
        0.0
    } else {
        // 2^(n−1); n ∈ [−126, 128] after the clamp, so the exponent field stays in range.
        let e = (fx - 1.0) as i32 + 127;
        f32::from_bits((e as u32) << 23)
    };
    p * pow * 2.0
}

/// Test inputs shared by the kernels' tests.
#[cfg(test)]
pub(super) mod test_values {
    use super::round;

    /// A small xorshift generator for test inputs.
    pub struct Rng(pub u64);
    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// A uniform value in [0, 1).
    pub fn unit(rng: &mut Rng) -> f32 {
        (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Values whose sums depend on the order: a spread of magnitudes and large cancelling pairs,
    /// rounded to bf16.
    pub fn hostile(rng: &mut Rng, n: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n)
            .map(|_| {
                let m = unit(rng) * 2.0 - 1.0;
                let e = (unit(rng) * 24.0) as i32 - 12;
                round(m * 2f32.powi(e))
            })
            .collect();
        if n >= 2 {
            let (a, b) = (
                (unit(rng) * n as f32) as usize % n,
                (unit(rng) * n as f32) as usize % n,
            );
            v[a] = 30720.0;
            v[b] = -30720.0;
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_adds_in_the_reference_order() {
        // 2^24 + 1 − 2^24 is 0 from the left, 1 when the big terms meet first (lane 0 of
        // registers 0 and 4).
        let mut a = vec![0f32; 64];
        let b = vec![1f32; 64];
        a[0] = 16_777_216.0;
        a[8] = 1.0;
        a[32] = -16_777_216.0;
        assert_eq!(seq_dot(&a, &b), 0.0);
        assert_eq!(dot(&a, &b), 1.0);
        // Lanes of the last register: l0 + l4 first.
        let mut a = vec![0f32; 64];
        a[0] = 16_777_216.0;
        a[1] = 1.0;
        a[4] = -16_777_216.0;
        assert_eq!(dot(&a, &b), 1.0);
        // The 16-wide tail and the scalar tail come after the blocks.
        let mut a = vec![0f32; 83];
        let b = vec![1f32; 83];
        a[0] = 16_777_216.0;
        a[64] = 1.0;
        a[72] = 1.0; // the same tail lane: 2, added to the blocks' sum in one go
        a[80] = 2.0; // the scalar tail
        assert_eq!(dot(&a, &b), 16_777_220.0);
        assert_eq!(seq_dot(&a, &b), 16_777_218.0);
    }

    #[test]
    fn sum_adds_in_the_reference_order() {
        let mut x = vec![0f32; 768];
        x[0] = 16_777_216.0;
        x[8] = 1.0; // the same lane, the next vector: absorbed
        x[1] = 1.0; // another lane
        x[9] = -16_777_216.0;
        // Lane 0 holds 2^24 (the 1 is lost), lane 1 holds 1 − 2^24; lanes add at the end.
        assert_eq!(sum(&x), 1.0);
        let x: Vec<f32> = (0..1000).map(|i| (i % 9) as f32).collect();
        assert_eq!(sum(&x), x.iter().sum::<f32>());
    }

    #[test]
    fn exp_u20_is_close_to_exp_and_exact_at_the_edges() {
        assert_eq!(exp_u20(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_u20(-100.0), 0.0);
        assert_eq!(exp_u20(0.0), 1.0);
        let mut worst = 0f64;
        let mut x = -80.0f32;
        while x <= 0.0 {
            let want = (x as f64).exp();
            let got = exp_u20(x) as f64;
            assert!(got.is_finite(), "exp_u20({x}) = {got}");
            worst = worst.max(((got - want) / want).abs());
            x += 0.01;
        }
        // The polynomial is accurate to about 20 ulp (2.4e-6), not to 1 ulp.
        assert!(worst < 3e-6, "exp_u20 relative error {worst}");
        assert!(
            worst > 1e-7,
            "exp_u20 should not be the correctly rounded exp"
        );
    }

    #[test]
    fn round_is_nearest_even() {
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
        assert_eq!(round(1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        assert_eq!(round(27.712_812), 27.75);
    }
}
