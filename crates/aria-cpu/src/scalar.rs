//! The scalar reference kernels. Every SIMD path implements the same functions with the same
//! meaning and is tested against these.

/// Width of a packed B panel in [`gemm_tile`] (columns) on this path, AVX2 and NEON.
pub const NR: usize = 16;
/// Most rows one [`gemm_tile`] call computes.
pub const MR: usize = 6;

/// Dot product (sequential f32 accumulation).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut s = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        s += x * y;
    }
    s
}

/// Check the slice extents a [`gemm_tile`] call reads and writes.
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn tile_extents_ok(
    mr_max: usize,
    nr: usize,
    mr: usize,
    kc: usize,
    a: &[f32],
    lda: usize,
    bp: &[f32],
    ldb: usize,
    c: &[f32],
    ldc: usize,
    nc: usize,
) -> bool {
    (1..=mr_max).contains(&mr)
        && nc <= nr
        && ldb >= nr
        && (kc == 0 || bp.len() >= (kc - 1) * ldb + nr)
        && (kc == 0 || a.len() >= (mr - 1) * lda + kc)
        && (nc == 0 || c.len() >= (mr - 1) * ldc + nc)
}

/// Micro-kernel of the packed matrix product:
/// `C[r][j] (+)= Σ_k A[r·lda + k] · Bp[k·ldb + j]` for `r < mr ≤ MR`, `j < nc ≤ NR`, `k < kc`,
/// where `Bp` holds `NR` readable columns per row (a zero-padded packed panel with `ldb = NR`, or
/// a slice of a wider row-major matrix). With `acc` false, C is overwritten.
/// Each output is one sequential sum over `k` (then added to C).
///
/// # Panics
/// If a slice is shorter than the extents above.
#[allow(clippy::too_many_arguments)]
pub fn gemm_tile(
    mr: usize,
    kc: usize,
    a: &[f32],
    lda: usize,
    bp: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    nc: usize,
    acc: bool,
) {
    assert!(
        tile_extents_ok(MR, NR, mr, kc, a, lda, bp, ldb, c, ldc, nc),
        "gemm_tile extents"
    );
    let mut t = [[0f32; NR]; MR];
    for k in 0..kc {
        let b = &bp[k * ldb..k * ldb + NR];
        for (r, tr) in t.iter_mut().enumerate().take(mr) {
            let av = a[r * lda + k];
            for (tv, bv) in tr.iter_mut().zip(b) {
                *tv += av * bv;
            }
        }
    }
    for (r, tr) in t.iter().enumerate().take(mr) {
        let cr = &mut c[r * ldc..r * ldc + nc];
        if acc {
            cr.iter_mut().zip(tr).for_each(|(c, t)| *c += t);
        } else {
            cr.copy_from_slice(&tr[..nc]);
        }
    }
}

/// Maximum (−∞ for an empty slice; NaN-ignoring like `f32::max`).
pub fn max(x: &[f32]) -> f32 {
    x.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// Sequential sum.
pub fn sum(x: &[f32]) -> f32 {
    x.iter().sum()
}

/// Sequential sum of squares.
pub fn sumsq(x: &[f32]) -> f32 {
    x.iter().map(|v| v * v).sum()
}

/// Sequential sum of squared deviations from `m`.
pub fn sumsq_dev(x: &[f32], m: f32) -> f32 {
    x.iter().map(|v| (v - m) * (v - m)).sum()
}

/// `x ← exp(x − m)`, returning the sequential sum of the new values.
pub fn exp_sub_sum(x: &mut [f32], m: f32) -> f32 {
    let mut s = 0.0;
    for e in x.iter_mut() {
        *e = (*e - m).exp();
        s += *e;
    }
    s
}

/// `x ← x · s`.
pub fn scale(x: &mut [f32], s: f32) {
    x.iter_mut().for_each(|v| *v *= s);
}

/// `x ← x / (1 + e^−x)`.
pub fn silu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = *v / (1.0 + (-*v).exp()));
}

/// `x ← 1 / (1 + e^−x)`.
pub fn sigmoid(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = 1.0 / (1.0 + (-*v).exp()));
}

/// `o ← v · silu(g)` (the shortest length counts).
pub fn swiglu(o: &mut [f32], v: &[f32], g: &[f32]) {
    for ((o, v), g) in o.iter_mut().zip(v).zip(g) {
        *o = v * (g / (1.0 + (-g).exp()));
    }
}

/// `o ← γ ⊙ tanh(α·x) + β` (dynamic tanh; the shortest length counts).
pub fn dyt(o: &mut [f32], x: &[f32], alpha: f32, g: &[f32], b: &[f32]) {
    for (((o, x), g), b) in o.iter_mut().zip(x).zip(g).zip(b) {
        *o = g * (alpha * x).tanh() + b;
    }
}

/// Taylor coefficients of `(tanh(x) − x) / x³` in powers of `x²`, highest first
/// (x¹⁵ … x³ terms of tanh: −929569/638512875, 21844/6081075, −1382/155925, 62/2835, −17/315,
/// 2/15, −1/3).
pub const TANH_TAYLOR: [f32; 7] = [
    -1.455_834_4e-3,
    3.592_128e-3,
    -8.863_236e-3,
    2.186_948_8e-2,
    -5.396_825_4e-2,
    0.133_333_33,
    -0.333_333_34,
];

crate::kernels::row_kernels!(arith: f32, []);

/// `x ← cap·tanh(x / cap)` (logit soft-capping).
pub fn softcap(x: &mut [f32], cap: f32) {
    x.iter_mut().for_each(|v| *v = cap * (*v / cap).tanh());
}

/// `sin(π·v)` with π rounded to f32 and the product rounded before `f32::sin`.
#[inline(always)]
fn sin_pi_f(v: f32) -> f32 {
    (std::f32::consts::PI * v).sin()
}

/// Exact GELU `0.5·v·(1 + erf(v/√2))` (`libm::erff`).
#[inline(always)]
fn gelu_f(v: f32) -> f32 {
    0.5 * v * (1.0 + libm::erff(v * std::f32::consts::FRAC_1_SQRT_2))
}

/// Tanh GELU `0.5·v·(1 + tanh(√(2/π)·(v + 0.044715·v³)))`.
#[inline(always)]
fn gelu_tanh_f(v: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/pi)
    0.5 * v * (1.0 + (C * (v + 0.044715 * v * v * v)).tanh())
}

/// `x ← sin(π·x)`.
pub fn sin_pi(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = sin_pi_f(*v));
}

/// `x ← gelu(x)` (erf form).
pub fn gelu(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu_f(*v));
}

/// `x ← gelu_tanh(x)`.
pub fn gelu_tanh(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = gelu_tanh_f(*v));
}

/// `o ← v·gelu(g)` (the shortest length counts).
pub fn geglu(o: &mut [f32], v: &[f32], g: &[f32]) {
    for ((o, v), g) in o.iter_mut().zip(v).zip(g) {
        *o = v * gelu_f(*g);
    }
}

/// `o ← v·gelu_tanh(g)` (the shortest length counts).
pub fn geglu_tanh(o: &mut [f32], v: &[f32], g: &[f32]) {
    for ((o, v), g) in o.iter_mut().zip(v).zip(g) {
        *o = v * gelu_tanh_f(*g);
    }
}

/// `o ← v·sin(π·g)` (the shortest length counts).
pub fn sin_pi_glu(o: &mut [f32], v: &[f32], g: &[f32]) {
    for ((o, v), g) in o.iter_mut().zip(v).zip(g) {
        *o = v * sin_pi_f(*g);
    }
}
