//! The CPU's products with packed weights: the body of the op set's `linear_packed` for the
//! block formats (`q8_0`, `q4_k`, `q6_k`), weight-only and W8A8.
//!
//! - [`blocks`]: the block layouts and their decoding, shared by every kernel path and by the
//!   reference dequantization of the formats (`aria-quant`, which also quantizes).
//! - [`kernels`]: f32 activations × packed rows, dequantized slab by slab while the CPU's f32
//!   product packs them (bit-identical to that product on the dequantized weight, on each path
//!   and for any thread count), and W8A8 (per-token int8 activations, exact int32 block sums on
//!   AMX-INT8, AVX-512 VNNI, AVX-VNNI, AVX2, NEON `sdot`/plain NEON, scalar), chosen by a
//!   `try_*` ladder from explicit inputs ([`kernels::KernelQuery`]).
//!
//! The blocks are the CPU's own layout for these formats: the kernels read them in place, so a
//! weight in a memory-mapped packed file is used without a copy, and
//! [`Cpu::upload_packed`](crate::Cpu) keeps them as they are.

pub mod blocks;
pub mod kernels;

use aria_tensor::format::WeightFormat;
use aria_tensor::{CoreError, Result};
use rayon::prelude::*;

use crate::threads;
use kernels::{IntIsa, Kernel, KernelQuery};

/// How a packed weight computes `x · Wᵀ`. An explicit configuration value (there is no
/// environment switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compute {
    /// f32 activations; the weight is dequantized inside the kernel.
    #[default]
    WeightOnly,
    /// Activations quantized per token to int8, int8 × int8 dot products (`q8_0` only).
    W8A8,
}

impl Compute {
    /// A short name (`weight-only`, `w8a8`).
    pub fn name(self) -> &'static str {
        match self {
            Compute::WeightOnly => "weight-only",
            Compute::W8A8 => "w8a8",
        }
    }

    /// Whether the mode can run on a weight of `format`.
    pub fn supports(self, format: impl Into<WeightFormat>) -> bool {
        let format = format.into();
        match self {
            Compute::WeightOnly => format != WeightFormat::Bf16Panels,
            Compute::W8A8 => format == WeightFormat::Q8_0,
        }
    }

    /// The mode of an op's `w8a8` flag.
    pub fn from_w8a8(w8a8: bool) -> Compute {
        if w8a8 {
            Compute::W8A8
        } else {
            Compute::WeightOnly
        }
    }
}

/// A borrowed view of a weight's packed rows `[rows, cols]` in one block format.
#[derive(Debug, Clone, Copy)]
pub struct WView<'a> {
    /// The format (`q8_0`, `q4_k` or `q6_k`).
    pub format: WeightFormat,
    /// `out`.
    pub rows: usize,
    /// `in`.
    pub cols: usize,
    /// The rows, one after the other.
    pub bytes: &'a [u8],
    /// Bytes per row (`format.row_bytes(cols)`).
    pub row_bytes: usize,
}

impl<'a> WView<'a> {
    /// A view of `rows` packed rows of `cols` weights, checked: a block format, and at least
    /// `rows · format.row_bytes(cols)` bytes.
    pub fn new(format: WeightFormat, rows: usize, cols: usize, bytes: &'a [u8]) -> Result<Self> {
        if format == WeightFormat::Bf16Panels {
            return Err(CoreError::Invalid(
                "a block view holds q8_0, q4_k or q6_k rows, not bf16 panels".into(),
            ));
        }
        let row_bytes = format.row_bytes(cols);
        if bytes.len() < rows * row_bytes {
            return Err(CoreError::shape(
                "packed rows",
                format!(
                    "{} bytes for {rows} {format} rows of {cols} weights ({row_bytes} bytes each)",
                    bytes.len()
                ),
                &[&[rows, cols]],
            ));
        }
        Ok(WView {
            format,
            rows,
            cols,
            bytes,
            row_bytes,
        })
    }

    /// Packed row `j`.
    #[inline]
    pub fn row(&self, j: usize) -> &[u8] {
        &self.bytes[j * self.row_bytes..(j + 1) * self.row_bytes]
    }

    /// The kernel a product with `m` activation rows in mode `compute` runs on, on the calling
    /// thread's paths.
    pub fn kernel(&self, compute: Compute, m: usize) -> Kernel {
        kernels::select(&KernelQuery::current(
            self.format,
            compute,
            m,
            self.rows,
            self.cols,
        ))
    }

    /// `out[m, rows] = x[m, cols] · Wᵀ` (row-major slices) on `kernel` (a path this CPU cannot
    /// run falls back to the scalar reference of the same mode), on the [`crate::threads`]
    /// pool.
    pub fn matmul(&self, kernel: Kernel, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
        let (n, k) = (self.rows, self.cols);
        if x.len() < m * k || out.len() < m * n {
            return Err(CoreError::shape(
                "packed matmul",
                format!(
                    "x has {} values and out {} for m = {m} (need {} and {})",
                    x.len(),
                    out.len(),
                    m * k,
                    m * n
                ),
                &[&[m, k], &[n, k]],
            ));
        }
        match kernel {
            Kernel::Dequant(isa) => {
                let isa = kernels::checked(isa);
                threads::install(|| kernels::gemm_dequant(isa, self, x, m, out));
            }
            Kernel::W8A8(isa) => {
                self.w8a8_only()?;
                let isa = isa.checked();
                threads::install(|| {
                    let acts = kernels::quantize_activations(x, m, k, isa.offset_acts());
                    kernels::gemm_w8a8(isa, self, &acts, out);
                });
            }
        }
        Ok(())
    }

    fn w8a8_only(&self) -> Result<()> {
        if self.format == WeightFormat::Q8_0 {
            Ok(())
        } else {
            Err(CoreError::Invalid(format!(
                "W8A8 runs on q8_0 weights only, not {}",
                self.format
            )))
        }
    }

    /// `x · Wᵀ + b` into a new `[m, rows]` vector: the bias added after each output's K-sum
    /// (the bits of adding it to the product afterwards). The weight-only product writes every
    /// output itself, with the bias, so the vector is not zero-filled first.
    pub fn matmul_bias(
        &self,
        kernel: Kernel,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
    ) -> Result<Vec<f32>> {
        let n = self.rows;
        if let Kernel::Dequant(isa) = kernel {
            if x.len() < m * self.cols {
                return Err(CoreError::shape(
                    "packed matmul",
                    format!("x has {} values for m = {m}", x.len()),
                    &[&[m, self.cols]],
                ));
            }
            let isa = kernels::checked(isa);
            return Ok(threads::install(|| {
                kernels::gemm_dequant_vec(isa, self, x, m, bias)
            }));
        }
        let mut out = vec![0f32; m * n];
        self.matmul(kernel, x, m, &mut out)?;
        if let Some(bd) = bias.filter(|b| !b.is_empty()) {
            threads::install(|| {
                out.par_chunks_mut(n).with_min_len(8).for_each(|row| {
                    for (o, b) in row.iter_mut().zip(bd) {
                        *o += b;
                    }
                })
            });
        }
        Ok(out)
    }

    /// The exact int32 W8A8 block sums `[m][rows][blocks]` for `x [m, cols]` on the int8 path
    /// `isa` (single-threaded; `q8_0` only). Every path gives the same sums; this exposes them
    /// for tests.
    pub fn w8a8_block_sums(&self, isa: IntIsa, x: &[f32], m: usize) -> Result<Vec<i32>> {
        self.w8a8_only()?;
        if x.len() < m * self.cols {
            return Err(CoreError::shape(
                "packed block sums",
                format!("x has {} values for m = {m}", x.len()),
                &[&[m, self.cols]],
            ));
        }
        let isa = isa.checked();
        let acts = kernels::quantize_activations(x, m, self.cols, isa.offset_acts());
        Ok(kernels::w8a8_block_sums(isa, self, &acts))
    }
}
