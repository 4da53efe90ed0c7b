// Math functions written out, shared by the non-GEMM shaders (after common.wgsl) and
// attention.wgsl: WGSL's built-ins promise less accuracy than the CPU reference needs
// (2^-11 absolute error for `sin`/`cos`), and `tanh` may overflow through `sinh/cosh` on some
// drivers. No bindings, no constants from the launch.

const PI_F32: f32 = 3.14159265358979323846;
const FRAC_1_SQRT_2: f32 = 0.70710678118654752440;
const SQRT_2_OVER_PI: f32 = 0.7978846;

fn nan_f32() -> f32 {
    return bitcast<f32>(0x7fc00000u);
}

// tanh: a Taylor polynomial (the CPU kernels' coefficients, x³ … x¹⁵) below |x| = 0.55,
// `1 − 2/(e^{2|x|} + 1)` above, saturating to ±1 (f32 tanh rounds to 1 beyond 9.01).
fn tanh_f(x: f32) -> f32 {
    let a = abs(x);
    if (a < 0.55) {
        let z = x * x;
        var y = -1.4558344e-3;
        y = y * z + 3.592128e-3;
        y = y * z - 8.863236e-3;
        y = y * z + 2.1869488e-2;
        y = y * z - 5.3968254e-2;
        y = y * z + 0.13333333;
        y = y * z - 0.33333334;
        return x + x * z * y;
    }
    if (a > 9.1) {
        return sign(x);
    }
    let e = exp(2.0 * a);
    let t = 1.0 - 2.0 / (e + 1.0);
    return select(t, -t, x < 0.0);
}

fn sigmoid_f(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

fn silu_f(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

// erfc(z) with fractional error below 1.2e-7 (Chebyshev fit of the complementary error
// function), so that `0.5·v·erfc(−v/√2)` keeps its relative accuracy for negative v.
fn erfc_f(z: f32) -> f32 {
    let a = abs(z);
    let t = 1.0 / (1.0 + 0.5 * a);
    var y = 0.17087277;
    y = y * t - 0.82215223;
    y = y * t + 1.48851587;
    y = y * t - 1.13520398;
    y = y * t + 0.27886807;
    y = y * t - 0.18628806;
    y = y * t + 0.09678418;
    y = y * t + 0.37409196;
    y = y * t + 1.00002368;
    y = y * t - 1.26551223;
    let r = t * exp(-a * a + y);
    return select(r, 2.0 - r, z < 0.0);
}

fn gelu_f(x: f32) -> f32 {
    return 0.5 * x * erfc_f(-x * FRAC_1_SQRT_2);
}

fn gelu_tanh_f(x: f32) -> f32 {
    return 0.5 * x * (1.0 + tanh_f(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)));
}

// (sin x, cos x): reduction by π/2 in three parts (exact products for |k| < 2^13, i.e.
// |x| < ~12 800), then the Cephes minimax polynomials on [−π/4, π/4] (≈1e-7 relative).
fn sincos_f(x: f32) -> vec2<f32> {
    let kf = round(x * 0.63661977236758134308);
    var r = x - kf * 1.5703125;
    r = r - kf * 4.837512969970703125e-4;
    r = r - kf * 7.54978995489188216e-8;
    let z = r * r;
    let s = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * (-1.9515295891e-4)));
    let c = 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    let quad = i32(kf) & 3;
    if (quad == 0) {
        return vec2<f32>(s, c);
    } else if (quad == 1) {
        return vec2<f32>(c, -s);
    } else if (quad == 2) {
        return vec2<f32>(-s, -c);
    }
    return vec2<f32>(-c, s);
}

fn sin_f(x: f32) -> f32 {
    return sincos_f(x).x;
}

