//! PyTorch's CPU random stream: the generator behind `torch.manual_seed(seed)` and what
//! `torch.randn` / `torch.rand` make of it, reproduced bit for bit.
//!
//! **Engine.** torch's default CPU generator is the 32-bit Mersenne Twister (MT19937,
//! Matsumoto & Nishimura 1998). `manual_seed(seed)` keeps the low 32 bits of the seed as
//! `state[0]`, fills `state[j] = 1812433253 · (state[j−1] ^ (state[j−1] >> 30)) + j` (wrapping),
//! and clears the cached normal value. One `random()` is one tempered MT19937 output;
//! `random64()` is two of them, the first as the high word: `(a << 32) | b`.
//!
//! **Uniforms.** A float32 uniform (`torch.rand`, and the first stage of float32 `randn`) keeps
//! the low 24 bits of one `random()`: `(r & (2²⁴ − 1)) · 2⁻²⁴` in `[0, 1)`. A float64 uniform
//! keeps the low 53 bits of one `random64()`: `(r & (2⁵³ − 1)) · 2⁻⁵³`.
//!
//! **`randn`, float32, 16 elements or more** (contiguous; every draw aria makes): all `n`
//! uniforms are drawn first, in element order. Then each block of 16 (`i = 0, 16, …` while
//! `i + 16 ≤ n`) becomes 16 normals by Box–Muller: for `j < 8`, `u1 = 1 − d[i+j]`,
//! `u2 = d[i+j+8]`, `r = sqrt(−2·ln u1)`, `θ = 2π·u2`, `d[i+j] = r·cos θ`, `d[i+j+8] = r·sin θ`.
//! When `16 ∤ n`, the last 16 positions are drawn again (16 fresh uniforms overwrite
//! `d[n−16..n]`) and transformed as one more block; so a tail shares no values with the block
//! before it. How `ln`, `cos` and `sin` are evaluated depends on the CPU kernel torch picked
//! ([`RandnKernel`]):
//! - [`RandnKernel::Avx2`] (x86-64 with AVX2 and without AVX-512, the common desktop and
//!   server case, and the machine the reference fixtures were recorded on): torch's
//!   `avx_mathfun` functions (Cephes-style `log256_ps` and `sincos256_ps`, 8 lanes at a time)
//!   in float32, with every multiply–add that the compiler of the official wheels fuses
//!   evaluated as a fused multiply–add. This path is reproduced with IEEE float32 operations
//!   alone (add, multiply, fused multiply–add, square root, integer conversions), so it gives
//!   the same bits on every platform.
//! - [`RandnKernel::Scalar`] (torch's default and AVX-512 kernels, e.g. ARM or AVX-512
//!   machines): float32 `logf`, `cosf`, `sinf` of the C library, with `θ` rounded to float32
//!   from `2π·u2` computed in float64. aria calls the platform's `f32::ln`/`cos`/`sin`, which
//!   are the same C functions on Linux with glibc; elsewhere a last-bit difference is possible.
//!
//! **`randn`, fewer than 16 elements** (either kernel): each element is one float64
//! `normal_distribution` sample rounded to float32. A sample takes the cached value if there is
//! one; otherwise it draws two float64 uniforms `u1`, `u2`, computes `r = sqrt(−2·log1p(−u2))`,
//! `θ = 2π·u1`, returns `r·cos θ` and caches `r·sin θ` (in float64) for the next scalar sample,
//! including one in a later call. The 16-or-more path neither reads nor clears that cache.
//!
//! **`randn`, float64:** the 16-or-more path in float64 (53-bit uniforms, the C library's
//! `log`, `cos`, `sin`); fewer than 16 elements as above without the rounding to float32.

use std::f64::consts::PI;

use rayon::prelude::*;

/// Blocks of 16 per parallel task of the Box–Muller stage.
const PAR_BLOCKS: usize = 4096;

const N: usize = 624;
const M: usize = 397;

/// The MT19937 engine as torch's CPU generator runs it (see the module docs).
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; N],
    next: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// An engine seeded like `torch.manual_seed(seed)` (only the low 32 bits of `seed` count).
    pub fn new(seed: u64) -> Self {
        let mut state = [0u32; N];
        state[0] = seed as u32;
        for j in 1..N {
            let p = state[j - 1];
            state[j] = 1_812_433_253u32
                .wrapping_mul(p ^ (p >> 30))
                .wrapping_add(j as u32);
        }
        Mt19937 { state, next: N }
    }

    fn twist(&mut self) {
        let s = &mut self.state;
        for k in 0..N {
            let y = (s[k] & 0x8000_0000) | (s[(k + 1) % N] & 0x7fff_ffff);
            let mut v = s[(k + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= 0x9908_b0df;
            }
            s[k] = v;
        }
        self.next = 0;
    }

    /// The next tempered 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.next >= N {
            self.twist();
        }
        let mut y = self.state[self.next];
        self.next += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }
}

/// Which of torch's CPU `randn` kernels to reproduce for float32 tensors of 16 elements or more
/// (see the module docs); smaller tensors and float64 are the same under both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RandnKernel {
    /// torch's AVX2 kernel (x86-64 with AVX2, without AVX-512): portable, bit-exact everywhere.
    #[default]
    Avx2,
    /// torch's default and AVX-512 kernels: the C library's `logf`/`cosf`/`sinf`.
    Scalar,
}

/// torch's CPU generator: [`Mt19937`] plus the cached float64 normal sample, with the uniform
/// and normal sampling of `torch.rand` / `torch.randn` (see the module docs).
#[derive(Debug, Clone)]
pub struct TorchGenerator {
    engine: Mt19937,
    next_double_normal: Option<f64>,
    kernel: RandnKernel,
}

impl TorchGenerator {
    /// The state `torch.manual_seed(seed)` leaves, reproducing the [`RandnKernel::Avx2`] kernel.
    pub fn manual_seed(seed: u64) -> Self {
        TorchGenerator {
            engine: Mt19937::new(seed),
            next_double_normal: None,
            kernel: RandnKernel::Avx2,
        }
    }

    /// The same generator reproducing `kernel` for large float32 `randn` draws.
    pub fn with_kernel(mut self, kernel: RandnKernel) -> Self {
        self.kernel = kernel;
        self
    }

    /// The kernel large float32 `randn` draws reproduce.
    pub fn kernel(&self) -> RandnKernel {
        self.kernel
    }

    /// One 32-bit output (torch's `random()`).
    pub fn random(&mut self) -> u32 {
        self.engine.next_u32()
    }

    /// Two 32-bit outputs, the first as the high word (torch's `random64()`).
    pub fn random64(&mut self) -> u64 {
        let hi = u64::from(self.random());
        let lo = u64::from(self.random());
        (hi << 32) | lo
    }

    /// One float32 uniform in `[0, 1)`: the low 24 bits of [`random`](Self::random) · 2⁻²⁴.
    pub fn uniform_f32(&mut self) -> f32 {
        (self.random() & 0x00ff_ffff) as f32 * (1.0 / 16_777_216.0)
    }

    /// One float64 uniform in `[0, 1)`: the low 53 bits of [`random64`](Self::random64) · 2⁻⁵³.
    pub fn uniform_f64(&mut self) -> f64 {
        (self.random64() & ((1u64 << 53) - 1)) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Fill `out` as `torch.rand` fills a float32 tensor (one [`uniform_f32`](Self::uniform_f32)
    /// per element, in order).
    pub fn rand_f32(&mut self, out: &mut [f32]) {
        out.iter_mut().for_each(|v| *v = self.uniform_f32());
    }

    /// Fill `out` as `torch.rand` fills a float64 tensor.
    pub fn rand_f64(&mut self, out: &mut [f64]) {
        out.iter_mut().for_each(|v| *v = self.uniform_f64());
    }

    /// One float64 standard-normal sample of torch's `normal_distribution<double>` (uses and
    /// refills the cached second Box–Muller value).
    pub fn normal_f64(&mut self) -> f64 {
        if let Some(v) = self.next_double_normal.take() {
            return v;
        }
        let u1 = self.uniform_f64();
        let u2 = self.uniform_f64();
        let r = (-2.0 * (-u2).ln_1p()).sqrt();
        let theta = 2.0 * PI * u1;
        self.next_double_normal = Some(r * theta.sin());
        r * theta.cos()
    }

    /// Fill `out` as `torch.randn` fills a contiguous float32 tensor of `out.len()` elements.
    pub fn randn_f32(&mut self, out: &mut [f32]) {
        let n = out.len();
        if n < 16 {
            out.iter_mut().for_each(|v| *v = self.normal_f64() as f32);
            return;
        }
        self.rand_f32(out);
        let block: fn(&mut [f32]) = match self.kernel {
            RandnKernel::Avx2 => box_muller16_avx2,
            RandnKernel::Scalar => box_muller16_scalar,
        };
        // Blocks are independent: transformed in parallel, the bits do not change.
        let full = n - n % 16;
        crate::threads::install(|| {
            out[..full]
                .par_chunks_mut(PAR_BLOCKS * 16)
                .for_each(|c| c.chunks_exact_mut(16).for_each(block));
        });
        if !n.is_multiple_of(16) {
            let tail = &mut out[n - 16..];
            self.rand_f32(tail);
            block(tail);
        }
    }

    /// Fill `out` as `torch.randn` fills a contiguous float64 tensor of `out.len()` elements.
    pub fn randn_f64(&mut self, out: &mut [f64]) {
        let n = out.len();
        if n < 16 {
            out.iter_mut().for_each(|v| *v = self.normal_f64());
            return;
        }
        self.rand_f64(out);
        let full = n - n % 16;
        crate::threads::install(|| {
            out[..full]
                .par_chunks_mut(PAR_BLOCKS * 16)
                .for_each(|c| c.chunks_exact_mut(16).for_each(box_muller16_f64));
        });
        if !n.is_multiple_of(16) {
            let tail = &mut out[n - 16..];
            self.rand_f64(tail);
            box_muller16_f64(tail);
        }
    }
}

/// 2π rounded to float32, as torch broadcasts it for the AVX2 kernel.
const TWO_PI_F32: f32 = (2.0 * PI) as f32;

fn box_muller16_avx2(d: &mut [f32]) {
    for j in 0..8 {
        let u1 = 1.0 - d[j];
        let u2 = d[j + 8];
        let r = (-2.0 * log_cephes(u1)).sqrt();
        let (s, c) = sincos_cephes(TWO_PI_F32 * u2);
        d[j] = r * c;
        d[j + 8] = r * s;
    }
}

fn box_muller16_scalar(d: &mut [f32]) {
    for j in 0..8 {
        let u1 = 1.0 - d[j];
        let u2 = d[j + 8];
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = (2.0 * PI * f64::from(u2)) as f32;
        d[j] = r * theta.cos();
        d[j + 8] = r * theta.sin();
    }
}

fn box_muller16_f64(d: &mut [f64]) {
    for j in 0..8 {
        let u1 = 1.0 - d[j];
        let u2 = d[j + 8];
        let r = (-2.0 * u1.ln()).sqrt();
        let theta = 2.0 * PI * u2;
        d[j] = r * theta.cos();
        d[j + 8] = r * theta.sin();
    }
}

/// One lane of torch's `log256_ps` (Cephes `logf`): the exponent and a mantissa in
/// `[√½, √2)`, a degree-9 polynomial, fused multiply–adds where the official build fuses them.
/// Defined for the `(0, 1]` inputs Box–Muller gives it.
#[allow(clippy::excessive_precision)] // the constants as the reference writes them
fn log_cephes(x: f32) -> f32 {
    const P: [f32; 9] = [
        7.0376836292E-2,
        -1.1514610310E-1,
        1.1676998740E-1,
        -1.2420140846E-1,
        1.4249322787E-1,
        -1.6668057665E-1,
        2.0000714765E-1,
        -2.4999993993E-1,
        3.3333331174E-1,
    ];
    const Q1: f32 = -2.12194440e-4;
    const Q2: f32 = 0.693359375;
    const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2; // 0.707106781186547524 rounded
    let x = x.max(f32::MIN_POSITIVE);
    let exp = (x.to_bits() >> 23) as i32 - 0x7f;
    let mut m = f32::from_bits((x.to_bits() & !0x7f80_0000) | 0.5f32.to_bits());
    let mut e = exp as f32 + 1.0;
    let small = m < SQRT_HALF;
    let keep = if small { m } else { 0.0 };
    m -= 1.0;
    if small {
        e -= 1.0;
    }
    m += keep;
    let z = m * m;
    let mut y = P[0];
    for p in &P[1..] {
        y = y.mul_add(m, *p);
    }
    let y = (y * m).mul_add(z, e * Q1);
    let y = y - z * 0.5;
    e.mul_add(Q2, m + y)
}

/// One lane of torch's `sincos256_ps` (Cephes `sinf`/`cosf`): reduction by multiples of π/4 in
/// three parts, the two Cephes polynomials, fused multiply–adds where the official build fuses
/// them. Returns `(sin x, cos x)`.
#[allow(clippy::excessive_precision)] // the constants as the reference writes them
fn sincos_cephes(x: f32) -> (f32, f32) {
    const FOPI: f32 = 1.27323954473516; // 4/π
    const DP1: f32 = -0.78515625;
    const DP2: f32 = -2.4187564849853515625e-4;
    const DP3: f32 = -3.77489497744594108e-8;
    const COS: [f32; 3] = [
        2.443315711809948E-005,
        -1.388731625493765E-003,
        4.166664568298827E-002,
    ];
    const SIN: [f32; 3] = [-1.9515295891E-4, 8.3321608736E-3, -1.6666654611E-1];
    let sign_sin = x.to_bits() & 0x8000_0000;
    let mut x = x.abs();
    // `as i32` truncates toward zero like the vector conversion (the argument is < 2³¹ here).
    let j = ((x * FOPI) as i32 + 1) & !1;
    let y = j as f32;
    let sign_sin = sign_sin ^ (((j & 4) as u32) << 29);
    let sign_cos = ((!(j - 2) & 4) as u32) << 29;
    let sine_poly = j & 2 == 0;
    x = y.mul_add(DP1, x);
    x = y.mul_add(DP2, x);
    x = y.mul_add(DP3, x);
    let z = x * x;
    let c = COS[0].mul_add(z, COS[1]).mul_add(z, COS[2]) * z;
    let c = c.mul_add(z, -(z * 0.5)) + 1.0;
    let s = SIN[0].mul_add(z, SIN[1]).mul_add(z, SIN[2]) * z;
    let s = s.mul_add(x, x);
    // The vector code selects with masks and adds the unselected polynomial as +0.
    let (sin, cos) = if sine_poly {
        (0.0 + s, c + 0.0)
    } else {
        (c + 0.0, 0.0 + s)
    };
    (
        f32::from_bits(sin.to_bits() ^ sign_sin),
        f32::from_bits(cos.to_bits() ^ sign_cos),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_the_reference_stream() {
        // The 10 000th output of the default-seeded (5489) MT19937 is 4123659995 (C++11
        // [rand.predef]).
        let mut g = Mt19937::new(5489);
        let v = (0..10_000).map(|_| g.next_u32()).last();
        assert_eq!(v, Some(4_123_659_995));
    }

    #[test]
    fn cephes_functions_are_accurate() {
        for k in 1..=1000 {
            let x = k as f32 / 1000.0;
            assert!((log_cephes(x) - x.ln()).abs() <= 2e-7 * x.ln().abs().max(1.0));
            let t = x * TWO_PI_F32;
            let (s, c) = sincos_cephes(t);
            assert!(
                (s - t.sin()).abs() < 3e-7 && (c - t.cos()).abs() < 3e-7,
                "{t}"
            );
        }
    }
}
