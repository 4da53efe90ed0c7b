//! Weight-only product: f32 activations × packed weights, dequantized panel by panel.

use crate::gemm::{self, BSrc, I8Rows, RowLayout, RowSource};

use super::Isa;
use crate::quant::WView;

/// The packed rows as a [`RowSource`]: the CPU product reads each KC slab of the rows it packs
/// as int8 with its scales and dequantizes it in registers while it transposes it into panels,
/// right before its micro-kernel consumes them.
struct Dequantized<'a>(&'a WView<'a>);

impl RowSource for Dequantized<'_> {
    fn read_row(&self, row: usize, k0: usize, out: &mut [f32]) {
        crate::quant::blocks::dequantize_cols(self.0.format, self.0.row(row), k0, out);
    }

    fn read_row_i8(
        &self,
        row: usize,
        k0: usize,
        q: &mut [i8],
        scale: &mut [f32],
        offset: &mut [f32],
    ) -> Option<I8Rows> {
        crate::quant::blocks::unpack_cols(self.0.format, self.0.row(row), k0, q, scale, offset)
    }

    fn layout(&self, k0: usize, kc: usize) -> Option<RowLayout<'_>> {
        let f = self.0.format;
        let (be, bb) = (f.block_elems(), f.block_bytes());
        Some(RowLayout {
            bytes: self.0.bytes,
            start: k0 / be * bb,
            stride: self.0.row_bytes,
            run: kc.div_ceil(be) * bb,
        })
    }
}

/// `out[M, N] = x[M, K] · Wᵀ` (`x` row-major with `lda = K`, `out` row-major), on the current
/// rayon pool; `isa` must come from [`super::checked`]. This is the CPU's f32 product
/// ([`crate::gemm::gemm`]) with B read through [`Dequantized`]: the same bits as the
/// f32 product of the dequantized weight, on every path and thread count.
pub(crate) fn gemm_dequant(isa: Isa, w: &WView<'_>, x: &[f32], m: usize, out: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    let src = Dequantized(w);
    gemm::gemm(isa, m, n, k, x, k, &BSrc::Rows(&src), &mut out[..m * n]);
}

/// [`gemm_dequant`] into a new `m × N` vector with `bias[j]` added after each output's K-sum
/// ([`crate::gemm::gemm_vec`]: every output written once, no zero-fill first).
pub(crate) fn gemm_dequant_vec(
    isa: Isa,
    w: &WView<'_>,
    x: &[f32],
    m: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let (n, k) = (w.rows, w.cols);
    let src = Dequantized(w);
    gemm::gemm_vec(isa, (m, n, k), x, k, &BSrc::Rows(&src), None, bias)
}
