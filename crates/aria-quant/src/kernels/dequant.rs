//! Weight-only product: f32 activations × packed weights, dequantized panel by panel.

use aria_core::cpu::gemm::{self, BSrc, RowSource};

use super::Isa;
use crate::matrix::WView;

/// The packed rows as a [`RowSource`]: the CPU product dequantizes each KC slab of the
/// rows it packs, right before its micro-kernel consumes the panel.
struct Dequantized<'a>(&'a WView<'a>);

impl RowSource for Dequantized<'_> {
    fn read_row(&self, row: usize, k0: usize, out: &mut [f32]) {
        self.0.format.dequantize_cols(self.0.row(row), k0, out);
    }
}

/// `out[M, N] = x[M, K] · Wᵀ` (`x` row-major with `lda = K`, `out` row-major), on the current
/// rayon pool; `isa` must come from [`super::checked`]. This is the CPU's f32 product
/// ([`aria_core::cpu::gemm::gemm`]) with B read through [`Dequantized`]: the same bits as the
/// f32 product of the dequantized weight, on every path and thread count.
pub(crate) fn gemm_dequant(isa: Isa, w: &WView<'_>, x: &[f32], m: usize, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    let src = Dequantized(w);
    gemm::gemm(isa, m, n, k, x, k, &BSrc::Rows(&src), &mut out[..m * n]);
}
