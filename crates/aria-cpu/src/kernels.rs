//! The generic bodies of the fused row kernels (one per kernel, over [`Simd`]) and the macro
//! that gives each ISA file its named wrappers.
//!
//! Arithmetic kernels (every path, bit-identical to the scalar formula): `norm_gain`,
//! `norm_gain1p`, `norm_gain_modulate`, `layer_norm_row`, `add_to`, `add_mul_to`, `axpby`,
//! `rope_half`, `affine`. Transcendental kernels (vector paths; the scalar path writes them with
//! the standard library): `softcap`, `sin_pi`, `gelu`, `gelu_tanh`, `geglu`,
//! `geglu_tanh`, `sin_pi_glu`.

use super::simd::{self, map2, map_inplace, zip_map, Simd};

/// `o ← x·inv·γ` (RMSNorm with a gain).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn norm_gain<S: Simd>(o: &mut [f32], x: &[f32], inv: f32, g: &[f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        let iv = S::splat(inv);
        map2::<S>(
            o,
            x,
            g,
            #[inline(always)]
            |x, g| x.mul(iv).mul(g),
        )
    }
}

/// `o ← x·inv·(1 + γ)` (Gemma's RMSNorm).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn norm_gain1p<S: Simd>(o: &mut [f32], x: &[f32], inv: f32, g: &[f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        let (iv, one) = (S::splat(inv), S::splat(1.0));
        map2::<S>(
            o,
            x,
            g,
            #[inline(always)]
            |x, g| x.mul(iv).mul(one.add(g)),
        )
    }
}

/// `y = x·inv·γ`, `o ← y·(1 + sc) + sh` (RMSNorm then the adaLN modulation; the shortest length
/// counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn norm_gain_modulate<S: Simd>(
    o: &mut [f32],
    x: &[f32],
    inv: f32,
    g: &[f32],
    sc: &[f32],
    sh: &[f32],
) {
    let n = o
        .len()
        .min(x.len())
        .min(g.len())
        .min(sc.len())
        .min(sh.len());
    let ins = [x.as_ptr(), g.as_ptr(), sc.as_ptr(), sh.as_ptr()];
    // SAFETY: every slice holds at least n elements; lane arithmetic.
    unsafe {
        let (iv, one) = (S::splat(inv), S::splat(1.0));
        zip_map::<S, 4, 1>(
            n,
            ins,
            [o.as_mut_ptr()],
            #[inline(always)]
            |[x, g, sc, sh]| [x.mul(iv).mul(g).mul(one.add(sc)).add(sh)],
        )
    }
}

/// `x ← (x − mean)·inv`, then `·w` and `+ b` where given (LayerNorm; the shortest length
/// counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn layer_norm_row<S: Simd>(
    x: &mut [f32],
    mean: f32,
    inv: f32,
    w: Option<&[f32]>,
    b: Option<&[f32]>,
) {
    let n = x
        .len()
        .min(w.map_or(usize::MAX, <[f32]>::len))
        .min(b.map_or(usize::MAX, <[f32]>::len));
    let p = x.as_mut_ptr();
    let xp = p as *const f32;
    // SAFETY: every slice holds at least n elements; x is read before it is written.
    unsafe {
        let (m, iv) = (S::splat(mean), S::splat(inv));
        match (w, b) {
            (Some(w), Some(b)) => zip_map::<S, 3, 1>(
                n,
                [xp, w.as_ptr(), b.as_ptr()],
                [p],
                #[inline(always)]
                |v| [v[0].sub(m).mul(iv).mul(v[1]).add(v[2])],
            ),
            (Some(w), None) => zip_map::<S, 2, 1>(
                n,
                [xp, w.as_ptr()],
                [p],
                #[inline(always)]
                |v| [v[0].sub(m).mul(iv).mul(v[1])],
            ),
            (None, Some(b)) => zip_map::<S, 2, 1>(
                n,
                [xp, b.as_ptr()],
                [p],
                #[inline(always)]
                |v| [v[0].sub(m).mul(iv).add(v[1])],
            ),
            (None, None) => zip_map::<S, 1, 1>(
                n,
                [xp],
                [p],
                #[inline(always)]
                |v| [v[0].sub(m).mul(iv)],
            ),
        }
    }
}

/// `h ← h + u` (the shorter length counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn add_to<S: Simd>(h: &mut [f32], u: &[f32]) {
    let n = h.len().min(u.len());
    let p = h.as_mut_ptr();
    // SAFETY: both slices hold at least n elements; h is read before it is written.
    unsafe {
        zip_map::<S, 2, 1>(
            n,
            [p as *const f32, u.as_ptr()],
            [p],
            #[inline(always)]
            |[h, u]| [h.add(u)],
        )
    }
}

/// `h ← h + u·g` (the shortest length counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn add_mul_to<S: Simd>(h: &mut [f32], u: &[f32], g: &[f32]) {
    let n = h.len().min(u.len()).min(g.len());
    let p = h.as_mut_ptr();
    let ins = [p as *const f32, u.as_ptr(), g.as_ptr()];
    // SAFETY: every slice holds at least n elements; h is read before it is written.
    unsafe {
        zip_map::<S, 3, 1>(
            n,
            ins,
            [p],
            #[inline(always)]
            |[h, u, g]| [h.add(u.mul(g))],
        )
    }
}

/// `o ← a·x + b·y` (the shortest length counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn axpby<S: Simd>(o: &mut [f32], a: f32, x: &[f32], b: f32, y: &[f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        let (av, bv) = (S::splat(a), S::splat(b));
        map2::<S>(
            o,
            x,
            y,
            #[inline(always)]
            |x, y| av.mul(x).add(bv.mul(y)),
        )
    }
}

/// Rotate-half rotary embedding of one row in place: with `R = c.len()` (even, `R ≤ x.len()`,
/// `s.len() ≥ R`) and `h = R/2`, `(x_i, x_{i+h}) ← (x_i·c_i − x_{i+h}·s_i,
/// x_{i+h}·c_{i+h} + x_i·s_{i+h})` for `i < h`; the other dims are untouched.
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn rope_half<S: Simd>(x: &mut [f32], c: &[f32], s: &[f32]) {
    let r = c.len().min(s.len()).min(x.len()) & !1;
    let h = r / 2;
    let (p, pc, ps) = (x.as_mut_ptr(), c.as_ptr(), s.as_ptr());
    // SAFETY: the streams cover x[..r], c[..r], s[..r]; both halves are read before either is
    // written.
    unsafe {
        let ins = [p as *const f32, p.add(h), pc, ps, pc.add(h), ps.add(h)];
        zip_map::<S, 6, 2>(
            h,
            ins,
            [p, p.add(h)],
            #[inline(always)]
            |[a, b, cl, sl, ch, shi]| [a.mul(cl).sub(b.mul(sl)), b.mul(ch).add(a.mul(shi))],
        )
    }
}

/// `x ← x·a + b`.
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn affine<S: Simd>(x: &mut [f32], a: f32, b: f32) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        let (av, bv) = (S::splat(a), S::splat(b));
        map_inplace::<S>(
            x,
            #[inline(always)]
            |v| v.mul(av).add(bv),
        )
    }
}

/// `x ← cap·tanh(x / cap)` (logit soft-capping).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn softcap<S: Simd>(x: &mut [f32], cap: f32) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        let c = S::splat(cap);
        map_inplace::<S>(
            x,
            #[inline(always)]
            |v| c.mul(simd::tanh(v.div(c))),
        )
    }
}

/// `x ← sin(π·x)` (the product rounded to f32 first).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn sin_pi<S: Simd>(x: &mut [f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        map_inplace::<S>(
            x,
            #[inline(always)]
            |v| simd::sin_pi(v),
        )
    }
}

/// `x ← gelu(x)` (erf form).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn gelu<S: Simd>(x: &mut [f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        map_inplace::<S>(
            x,
            #[inline(always)]
            |v| simd::gelu(v),
        )
    }
}

/// `x ← gelu_tanh(x)`.
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn gelu_tanh<S: Simd>(x: &mut [f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        map_inplace::<S>(
            x,
            #[inline(always)]
            |v| simd::gelu_tanh(v),
        )
    }
}

/// `o ← v·gelu(g)` (the shortest length counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn geglu<S: Simd>(o: &mut [f32], v: &[f32], g: &[f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        map2::<S>(
            o,
            v,
            g,
            #[inline(always)]
            |v, g| v.mul(simd::gelu(g)),
        )
    }
}

/// `o ← v·gelu_tanh(g)` (the shortest length counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn geglu_tanh<S: Simd>(o: &mut [f32], v: &[f32], g: &[f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        map2::<S>(
            o,
            v,
            g,
            #[inline(always)]
            |v, g| v.mul(simd::gelu_tanh(g)),
        )
    }
}

/// `o ← v·sin(π·g)` (the shortest length counts).
///
/// # Safety
/// The path's features must be present.
#[inline(always)]
pub unsafe fn sin_pi_glu<S: Simd>(o: &mut [f32], v: &[f32], g: &[f32]) {
    // SAFETY: lane arithmetic; the caller runs with the path's features.
    unsafe {
        map2::<S>(
            o,
            v,
            g,
            #[inline(always)]
            |v, g| v.mul(simd::sin_pi(g)),
        )
    }
}

/// Named wrappers of the generic kernels for one path: `row_kernels!(arith: T, [unsafe],
/// #[target_feature(...)])` gives the arithmetic kernels (the scalar path passes `f32, []`),
/// `row_kernels!(transcendental: T, #[target_feature(...)])` the others (vector paths only).
macro_rules! row_kernels {
    (arith: $v:ty, [$($q:tt)?] $(, #[$a:meta])*) => {
        /// `o ← x·inv·γ` (the shortest length counts).
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn norm_gain(o: &mut [f32], x: &[f32], inv: f32, g: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::norm_gain::<$v>(o, x, inv, g) }
        }
        /// `o ← x·inv·(1 + γ)` (the shortest length counts).
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn norm_gain1p(o: &mut [f32], x: &[f32], inv: f32, g: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::norm_gain1p::<$v>(o, x, inv, g) }
        }
        /// `o ← (x·inv·γ)·(1 + sc) + sh` (the shortest length counts).
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn norm_gain_modulate(
            o: &mut [f32],
            x: &[f32],
            inv: f32,
            g: &[f32],
            sc: &[f32],
            sh: &[f32],
        ) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::norm_gain_modulate::<$v>(o, x, inv, g, sc, sh) }
        }
        /// `x ← (x − mean)·inv`, then `·w` and `+ b` where given.
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn layer_norm_row(
            x: &mut [f32],
            mean: f32,
            inv: f32,
            w: Option<&[f32]>,
            b: Option<&[f32]>,
        ) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::layer_norm_row::<$v>(x, mean, inv, w, b) }
        }
        /// `h ← h + u` (the shorter length counts).
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn add_to(h: &mut [f32], u: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::add_to::<$v>(h, u) }
        }
        /// `h ← h + u·g` (the shortest length counts).
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn add_mul_to(h: &mut [f32], u: &[f32], g: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::add_mul_to::<$v>(h, u, g) }
        }
        /// `o ← a·x + b·y` (the shortest length counts).
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn axpby(o: &mut [f32], a: f32, x: &[f32], b: f32, y: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::axpby::<$v>(o, a, x, b, y) }
        }
        /// Rotate-half rotary embedding of one row in place on its first `R = c.len()` dims.
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn rope_half(x: &mut [f32], c: &[f32], s: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::rope_half::<$v>(x, c, s) }
        }
        /// `x ← x·a + b`.
        ///
        /// # Safety
        /// On a vector path the CPU must support its features (safe on the scalar path).
        $(#[$a])*
        pub $($q)? fn affine(x: &mut [f32], a: f32, b: f32) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::affine::<$v>(x, a, b) }
        }
    };
    (transcendental: $v:ty $(, #[$a:meta])*) => {
        /// `x ← cap·tanh(x / cap)`.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        $(#[$a])*
        pub unsafe fn softcap(x: &mut [f32], cap: f32) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::softcap::<$v>(x, cap) }
        }
        /// `x ← sin(π·x)`.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        $(#[$a])*
        pub unsafe fn sin_pi(x: &mut [f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::sin_pi::<$v>(x) }
        }
        /// `x ← gelu(x)` (erf form).
        ///
        /// # Safety
        /// The CPU must support the path's features.
        $(#[$a])*
        pub unsafe fn gelu(x: &mut [f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::gelu::<$v>(x) }
        }
        /// `x ← gelu_tanh(x)`.
        ///
        /// # Safety
        /// The CPU must support the path's features.
        $(#[$a])*
        pub unsafe fn gelu_tanh(x: &mut [f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::gelu_tanh::<$v>(x) }
        }
        /// `o ← v·gelu(g)` (the shortest length counts).
        ///
        /// # Safety
        /// The CPU must support the path's features.
        $(#[$a])*
        pub unsafe fn geglu(o: &mut [f32], v: &[f32], g: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::geglu::<$v>(o, v, g) }
        }
        /// `o ← v·gelu_tanh(g)` (the shortest length counts).
        ///
        /// # Safety
        /// The CPU must support the path's features.
        $(#[$a])*
        pub unsafe fn geglu_tanh(o: &mut [f32], v: &[f32], g: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::geglu_tanh::<$v>(o, v, g) }
        }
        /// `o ← v·sin(π·g)` (the shortest length counts).
        ///
        /// # Safety
        /// The CPU must support the path's features.
        $(#[$a])*
        pub unsafe fn sin_pi_glu(o: &mut [f32], v: &[f32], g: &[f32]) {
            // SAFETY: the path's features are present (the caller's contract).
            unsafe { $crate::kernels::sin_pi_glu::<$v>(o, v, g) }
        }
    };
}
pub(crate) use row_kernels;

#[cfg(test)]
mod tests {
    //! Every arithmetic kernel on every path this machine runs gives the scalar path's bits, for
    //! lengths around the vector widths, with outputs at every offset.
    use crate::{rows, Isa};

    fn vals(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 - 1001.0) / 137.0)
            .collect()
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// `f(isa, n, offset)` on every path against the scalar path.
    fn check(what: &str, f: impl Fn(Isa, usize, usize) -> Vec<f32>) {
        for n in [0, 1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100] {
            for off in [0, 1, 3] {
                let want = bits(&f(Isa::Scalar, n, off));
                for isa in Isa::available() {
                    assert_eq!(
                        bits(&f(isa, n, off)),
                        want,
                        "{what} [{}] n={n} offset={off}",
                        isa.name()
                    );
                }
            }
        }
    }

    #[test]
    fn arithmetic_kernels_match_scalar_bits() {
        let (inv, mean) = (0.37f32, -0.21f32);
        check("norm_gain", |isa, n, o| {
            let (x, g) = (vals(n + o, 1), vals(n, 2));
            let mut out = vec![0f32; n];
            rows::norm_gain(isa, &mut out, &x[o..], inv, &g);
            out
        });
        check("norm_gain1p", |isa, n, o| {
            let (x, g) = (vals(n + o, 3), vals(n, 4));
            let mut out = vec![0f32; n];
            rows::norm_gain1p(isa, &mut out, &x[o..], inv, &g);
            out
        });
        check("norm_gain_modulate", |isa, n, o| {
            let (x, g, sc, sh) = (vals(n + o, 5), vals(n, 6), vals(n, 7), vals(n, 8));
            let mut out = vec![0f32; n];
            rows::norm_gain_modulate(isa, &mut out, &x[o..], inv, &g, &sc, &sh);
            out
        });
        for (w, b) in [(true, true), (true, false), (false, true), (false, false)] {
            check(&format!("layer_norm_row w={w} b={b}"), |isa, n, o| {
                let (mut x, wv, bv) = (vals(n + o, 9), vals(n, 10), vals(n, 11));
                let (w, b) = (w.then_some(&wv[..]), b.then_some(&bv[..]));
                rows::layer_norm_row(isa, &mut x[o..], mean, inv, w, b);
                x
            });
        }
        check("add_to", |isa, n, o| {
            let (mut h, u) = (vals(n + o, 12), vals(n, 13));
            rows::add_to(isa, &mut h[o..], &u);
            h
        });
        check("add_mul_to", |isa, n, o| {
            let (mut h, u, g) = (vals(n + o, 14), vals(n, 15), vals(n, 16));
            rows::add_mul_to(isa, &mut h[o..], &u, &g);
            h
        });
        check("axpby", |isa, n, o| {
            let (x, y) = (vals(n + o, 17), vals(n, 18));
            let mut out = vec![0f32; n];
            rows::axpby(isa, &mut out, 0.3, &x[o..], -1.7, &y);
            out
        });
        check("affine", |isa, n, o| {
            let mut x = vals(n + o, 19);
            rows::affine(isa, &mut x[o..], -0.6, 0.25);
            x
        });
        // RoPE on the first 2·⌊n/2⌋ dims of a row of n + 3 (the rest must be untouched).
        check("rope_half", |isa, n, o| {
            let r = n & !1;
            let (mut x, c, s) = (vals(n + 3 + o, 20), vals(r, 21), vals(r + o, 22));
            rows::rope_half(isa, &mut x[o..], &c, &s[o..]);
            x
        });
    }

    #[test]
    fn rope_half_leaves_the_other_dims() {
        let mut x = vals(10, 1);
        let before = x.clone();
        for isa in Isa::available() {
            let mut y = before.clone();
            rows::rope_half(isa, &mut y, &vals(4, 2), &vals(4, 3));
            assert_eq!(bits(&y[4..]), bits(&before[4..]), "[{}]", isa.name());
            assert_ne!(bits(&y[..4]), bits(&before[..4]));
        }
        rows::rope_half(Isa::Scalar, &mut x, &[], &[]);
        assert_eq!(bits(&x), bits(&before));
    }
}
