//! The one tolerance table of the op harness: per op and format, the largest relative error
//! (`max|Δ| / max|ref|`) a backend may show against the CPU reference, and why. `0` means the
//! bits must be identical (data movement, and arithmetic every backend does in the same order).
//! `docs/op-harness.md` prints this table; a test keeps the two equal.

/// One row of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tol {
    /// The op (an entry of `Op::NAMES`).
    pub op: &'static str,
    /// The format.
    pub format: &'static str,
    /// The bound on the relative error.
    pub rel: f32,
    /// Why the bound is what it is.
    pub why: &'static str,
}

const SUM_ORDER: &str =
    "products summed in another order (tiles, FMA): a few ulps of the K-term sums";
const TRANSCENDENTAL: &str =
    "exp/tanh/erf/sin from the device's own math library: a few ulps per element";
const ROW_REDUCTION: &str =
    "a reduction over the row in another order (tree on a device), then an elementwise step";
const EXACT: &str = "data movement or a single rounded operation: the bits must be identical";
const HALF_WEIGHTS: &str = "f32 sums of widened weights; a device may run the product on \
    tensor cores with activations rounded to the weight's 16-bit format (CUDA): 2^-11 relative";

macro_rules! tol {
    ($op:literal, $fmt:literal, $rel:expr, $why:expr) => {
        Tol {
            op: $op,
            format: $fmt,
            rel: $rel,
            why: $why,
        }
    };
}

/// The table.
pub const TOLERANCES: &[Tol] = &[
    tol!("linear", "f32", 1e-5, SUM_ORDER),
    tol!(
        "linear",
        "prepared",
        1e-5,
        "f32 weights laid out once by the backend (the CPU's packed panels): \
        products summed in another order (tiles, FMA), as for f32"
    ),
    tol!("linear", "bf16", 1e-3, HALF_WEIGHTS),
    tol!("linear", "f16", 1e-3, HALF_WEIGHTS),
    tol!(
        "linear_packed",
        "q8_0",
        1e-5,
        "the same blocks dequantized exactly; f32 sums in \
        another order (the CPU's product sums each dequantized row in its blocked K order, a \
        device kernel within blocks, then across)"
    ),
    tol!(
        "linear_packed",
        "q8_0+w8a8",
        2e-3,
        "the activations are rounded to int8 per token: a \
        value at a rounding tie may land on the other side when the scale differs by an ulp, \
        moving one product by a whole quantization step (about 1/127 of the row's largest \
        value, times one weight)"
    ),
    tol!(
        "linear_packed",
        "q4_k",
        1e-5,
        "the same blocks dequantized exactly; f32 sums in \
        another order"
    ),
    tol!(
        "linear_packed",
        "q6_k",
        1e-5,
        "the same blocks dequantized exactly; f32 sums in \
        another order"
    ),
    tol!(
        "linear_packed",
        "bf16_panels",
        2e-5,
        "the same bf16 pairs summed in the same order per output: \
        `vdpbf16ps` and its emulation give the reference's bits; the AMX tile unit (the CPU's \
        choice where it has one) rounds inside each tile product in its own way, within f32 \
        accumulation of the exact sum"
    ),
    tol!("matmul", "f32", 1e-5, SUM_ORDER),
    tol!("conv1d", "f32", 1e-5, SUM_ORDER),
    tol!(
        "attention",
        "f32",
        1e-5,
        "two products, an exponential and a running softmax in \
        another order"
    ),
    tol!(
        "attention",
        "bf16_products",
        1e-2,
        "the products may round q, k, the probabilities and v to bf16 \
        (2^-9 relative each): the CPU takes that on its AMX tile unit only, a backend that \
        computes in f32 differs from it by those roundings; elsewhere as the f32 row"
    ),
    tol!("unary", "f32", 1e-5, TRANSCENDENTAL),
    tol!("affine", "f32", 0.0, EXACT),
    tol!("mul_scalar", "f32", 0.0, EXACT),
    tol!("add_scalar", "f32", 0.0, EXACT),
    tol!("binary", "f32", 0.0, EXACT),
    tol!("glu", "f32", 1e-5, TRANSCENDENTAL),
    tol!("softmax", "f32", 1e-5, ROW_REDUCTION),
    tol!(
        "axpby",
        "f32",
        0.0,
        "two products and a sum in the formula's order, no FMA"
    ),
    tol!("rms_norm", "f32", 1e-5, ROW_REDUCTION),
    tol!("layer_norm", "f32", 1e-5, ROW_REDUCTION),
    tol!("dyt", "f32", 1e-5, TRANSCENDENTAL),
    tol!("std_last", "f32", 1e-5, ROW_REDUCTION),
    tol!(
        "rope",
        "f32",
        1e-6,
        "x·cos + rotate(x)·sin: two products and a sum, contracted to an \
        FMA by some compilers"
    ),
    tol!(
        "rope_table",
        "f32",
        1e-5,
        "sin/cos of p·f from the device's math library"
    ),
    tol!("rms_norm_modulate", "f32", 1e-5, ROW_REDUCTION),
    tol!(
        "gated_residual_add",
        "f32",
        1e-6,
        "h + u·g: one product and a sum, contracted to an \
        FMA by some compilers"
    ),
    tol!(
        "split_heads",
        "f32",
        1e-5,
        "a copy, then the row's RMS and the rotation"
    ),
    tol!("merge_heads", "f32", 0.0, EXACT),
    tol!(
        "apg_guidance",
        "f32",
        1e-5,
        "norms and a dot product over the item, in f64 on the CPU \
        and in f32 trees on a device"
    ),
    tol!(
        "cfg_rescale",
        "f32",
        1e-5,
        "channel means and spreads in f32 on a device (f64 on the CPU), then one ratio per \
        item and position"
    ),
    tol!(
        "qkv_heads",
        "f32",
        1e-5,
        "a copy, DyT's tanh, then the rotation"
    ),
    tol!("unfold", "f32", 0.0, EXACT),
    tol!("contiguous", "f32", 0.0, EXACT),
    tol!("contiguous", "bf16", 0.0, EXACT),
    tol!(
        "to_dtype",
        "f32",
        0.0,
        "round to nearest even, one rounding"
    ),
    tol!("cat", "f32", 0.0, EXACT),
    tol!("pad", "f32", 0.0, EXACT),
    tol!("embedding", "f32", 0.0, EXACT),
    tol!(
        "embedding",
        "bf16",
        0.0,
        "a widening of the stored rows: exact"
    ),
    tol!(
        "fourier_features",
        "f32",
        1e-5,
        "sin/cos from the device's math library (the CPU \
        rounds an f64 evaluation)"
    ),
    tol!("fill_masked_rows", "f32", 0.0, EXACT),
    tol!(
        "torch_bf16_linear",
        "bf16",
        0.0,
        "a bit-for-bit replay of PyTorch's CPU arithmetic: \
        a backend either reproduces it or lacks the op"
    ),
    tol!("torch_bf16_attention", "bf16", 0.0, "a bit-for-bit replay"),
    tol!("torch_bf16_rms_norm", "bf16", 0.0, "a bit-for-bit replay"),
    tol!("torch_bf16_rope", "bf16", 0.0, "a bit-for-bit replay"),
    tol!("torch_bf16_gelu_tanh", "bf16", 0.0, "a bit-for-bit replay"),
    tol!("torch_bf16_round", "bf16", 0.0, "a bit-for-bit replay"),
    tol!("torch_bf16_binary", "bf16", 0.0, "a bit-for-bit replay"),
];

/// The row of `(op, format)`.
pub fn tolerance(op: &str, format: &str) -> Option<&'static Tol> {
    TOLERANCES.iter().find(|t| t.op == op && t.format == format)
}
