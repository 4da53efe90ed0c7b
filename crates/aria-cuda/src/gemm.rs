//! Row-major products as cuBLAS (column-major) strided-batched GEMMs.
//!
//! A row-major `C [M, N] = A [M, K] · B [K, N]` is the column-major `Cᵀ = Bᵀ·Aᵀ`, so every
//! product is described with the operands swapped. [`Gemm`] is that description, built by
//! [`Gemm::linear`], [`Gemm::matmul`] and [`Gemm::conv`]; [`Gemm::reference`] evaluates it the
//! way cuBLAS defines the call, which the tests use to check each layout on the CPU.

use cudarc::driver::{DeviceRepr, LaunchConfig};

use crate::error::{CudaError, CudaResult};

/// Element type of a GEMM input (the output is always f32, accumulated in f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GemmType {
    /// f32 (CUBLAS_COMPUTE_32F without TF32: full f32 products).
    F32,
    /// fp16 tensor cores, f32 accumulate.
    F16,
    /// bf16 tensor cores, f32 accumulate.
    Bf16,
}

/// One `cublasGemmStridedBatchedEx` call in cuBLAS's (column-major) terms: `C = op(A)·op(B)`
/// with `op(A)` `m × k`, `op(B)` `k × n`, `C` `m × n`, leading dimensions and batch strides in
/// elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gemm {
    /// `op(A)` is `Aᵀ`.
    pub trans_a: bool,
    /// `op(B)` is `Bᵀ`.
    pub trans_b: bool,
    /// Rows of `C` (cuBLAS `m`).
    pub m: i32,
    /// Columns of `C` (cuBLAS `n`).
    pub n: i32,
    /// Inner dimension.
    pub k: i32,
    /// Leading dimension of `A`.
    pub lda: i32,
    /// Leading dimension of `B`.
    pub ldb: i32,
    /// Leading dimension of `C`.
    pub ldc: i32,
    /// Batch stride of `A` (0: shared).
    pub stride_a: i64,
    /// Batch stride of `B`.
    pub stride_b: i64,
    /// Batch stride of `C`.
    pub stride_c: i64,
    /// Batch count.
    pub batch: i32,
}

fn int(op: &'static str, v: usize) -> CudaResult<i32> {
    i32::try_from(v).map_err(|_| CudaError::Limit {
        op,
        reason: format!("dimension {v} exceeds cuBLAS's 32-bit sizes"),
    })
}

fn long(op: &'static str, v: usize) -> CudaResult<i64> {
    i64::try_from(v).map_err(|_| CudaError::Limit {
        op,
        reason: format!("stride {v} exceeds 64 bits"),
    })
}

impl Gemm {
    /// `y [M, N] = x [M, K] · w [N, K]ᵀ` (all row-major): `A = w` (transposed), `B = x`.
    pub fn linear(m: usize, k: usize, n: usize) -> CudaResult<Gemm> {
        const OP: &str = "linear";
        Ok(Gemm {
            trans_a: true,
            trans_b: false,
            m: int(OP, n)?,
            n: int(OP, m)?,
            k: int(OP, k)?,
            lda: int(OP, k.max(1))?,
            ldb: int(OP, k.max(1))?,
            ldc: int(OP, n.max(1))?,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            batch: 1,
        })
    }

    /// `c [b, M, N] = a [b, M, K] · b [b, K, N]` (row-major, contiguous): `A = b`, `B = a`.
    pub fn matmul(batch: usize, m: usize, k: usize, n: usize) -> CudaResult<Gemm> {
        const OP: &str = "matmul";
        Ok(Gemm {
            trans_a: false,
            trans_b: false,
            m: int(OP, n)?,
            n: int(OP, m)?,
            k: int(OP, k)?,
            lda: int(OP, n.max(1))?,
            ldb: int(OP, k.max(1))?,
            ldc: int(OP, n.max(1))?,
            stride_a: long(OP, k * n)?,
            stride_b: long(OP, m * k)?,
            stride_c: long(OP, m * n)?,
            batch: int(OP, batch)?,
        })
    }

    /// `out [b, Cout, Lo] = w [Cout, CK] · col [b, CK, Lo]` (row-major; `col` the im2col matrix,
    /// or `x` itself for a kernel of 1 without padding): `A = col`, `B = w` shared by the batch.
    pub fn conv(batch: usize, cout: usize, ck: usize, lo: usize) -> CudaResult<Gemm> {
        const OP: &str = "conv1d";
        Ok(Gemm {
            trans_a: false,
            trans_b: false,
            m: int(OP, lo)?,
            n: int(OP, cout)?,
            k: int(OP, ck)?,
            lda: int(OP, lo.max(1))?,
            ldb: int(OP, ck.max(1))?,
            ldc: int(OP, lo.max(1))?,
            stride_a: long(OP, ck * lo)?,
            stride_b: 0,
            stride_c: long(OP, cout * lo)?,
            batch: int(OP, batch)?,
        })
    }

    /// Evaluate the call exactly as cuBLAS defines it (column-major, f64 accumulation), on
    /// host slices: the reference the layouts are tested against.
    pub fn reference(&self, a: &[f32], b: &[f32], c: &mut [f32]) {
        let (m, n, k) = (self.m as usize, self.n as usize, self.k as usize);
        for bi in 0..self.batch as usize {
            let (oa, ob, oc) = (
                bi * self.stride_a as usize,
                bi * self.stride_b as usize,
                bi * self.stride_c as usize,
            );
            for j in 0..n {
                for i in 0..m {
                    let mut s = 0f64;
                    for p in 0..k {
                        // Column-major X[r, c] = X[r + c·ld].
                        let av = if self.trans_a {
                            a[oa + p + i * self.lda as usize]
                        } else {
                            a[oa + i + p * self.lda as usize]
                        };
                        let bv = if self.trans_b {
                            b[ob + j + p * self.ldb as usize]
                        } else {
                            b[ob + p + j * self.ldb as usize]
                        };
                        s += f64::from(av) * f64::from(bv);
                    }
                    c[oc + i + j * self.ldc as usize] = s as f32;
                }
            }
        }
    }
}

/// The by-value arguments of `gemm_fallback` (`struct GemmArgs` in `gemm.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmArgs {
    trans_a: i32,
    trans_b: i32,
    m: i32,
    n: i32,
    k: i32,
    lda: i32,
    ldb: i32,
    ldc: i32,
    stride_a: i64,
    stride_b: i64,
    stride_c: i64,
    batch: i32,
    ty: i32,
}

// SAFETY: `repr(C)` plain integers laid out as `struct GemmArgs` in `gemm.cu` (eight i32, three
// i64, two i32: no padding).
unsafe impl DeviceRepr for GemmArgs {}

/// Output tile edge of `gemm_fallback`.
pub const FALLBACK_TILE: u32 = 16;

impl Gemm {
    /// The arguments and launch of the fallback kernel (used when libcublas is absent).
    pub fn fallback(&self, ty: GemmType) -> CudaResult<(GemmArgs, LaunchConfig)> {
        let blocks = |v: i32| (v.max(0) as u32).div_ceil(FALLBACK_TILE).max(1);
        let (gy, gz) = (blocks(self.n), self.batch.max(1) as u32);
        if gy > 65_535 || gz > 65_535 {
            return Err(CudaError::Limit {
                op: "gemm",
                reason: format!(
                    "{} columns or {} batches exceed the fallback grid",
                    self.n, self.batch
                ),
            });
        }
        let args = GemmArgs {
            trans_a: i32::from(self.trans_a),
            trans_b: i32::from(self.trans_b),
            m: self.m,
            n: self.n,
            k: self.k,
            lda: self.lda,
            ldb: self.ldb,
            ldc: self.ldc,
            stride_a: self.stride_a,
            stride_b: self.stride_b,
            stride_c: self.stride_c,
            batch: self.batch,
            ty: match ty {
                GemmType::F32 => 0,
                GemmType::F16 => 1,
                GemmType::Bf16 => 2,
            },
        };
        let cfg = LaunchConfig {
            grid_dim: (blocks(self.m), gy, gz),
            block_dim: (FALLBACK_TILE, FALLBACK_TILE, 1),
            shared_mem_bytes: 0,
        };
        Ok((args, cfg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(n: usize, s: f32) -> Vec<f32> {
        (0..n).map(|i| ((i * 7 % 11) as f32 - 5.0) * s).collect()
    }

    #[test]
    fn linear_layout_is_x_times_w_transposed() {
        let (m, k, n) = (3, 4, 5);
        let (x, w) = (seq(m * k, 0.5), seq(n * k, 0.25));
        let mut y = vec![0f32; m * n];
        // A = w, B = x.
        Gemm::linear(m, k, n)
            .expect("fits")
            .reference(&w, &x, &mut y);
        for r in 0..m {
            for c in 0..n {
                let want: f32 = (0..k).map(|p| x[r * k + p] * w[c * k + p]).sum();
                assert_eq!(y[r * n + c], want, "({r}, {c})");
            }
        }
    }

    #[test]
    fn matmul_layout_is_row_major_batched() {
        let (bt, m, k, n) = (2, 3, 4, 2);
        let (a, b) = (seq(bt * m * k, 1.0), seq(bt * k * n, 0.5));
        let mut c = vec![0f32; bt * m * n];
        Gemm::matmul(bt, m, k, n)
            .expect("fits")
            .reference(&b, &a, &mut c);
        for t in 0..bt {
            for r in 0..m {
                for cc in 0..n {
                    let want: f32 = (0..k)
                        .map(|p| a[t * m * k + r * k + p] * b[t * k * n + p * n + cc])
                        .sum();
                    assert_eq!(c[t * m * n + r * n + cc], want);
                }
            }
        }
    }

    #[test]
    fn conv_layout_shares_the_weight_across_the_batch() {
        let (bt, cout, ck, lo) = (2, 3, 4, 5);
        let (w, col) = (seq(cout * ck, 0.5), seq(bt * ck * lo, 1.0));
        let mut out = vec![0f32; bt * cout * lo];
        Gemm::conv(bt, cout, ck, lo)
            .expect("fits")
            .reference(&col, &w, &mut out);
        for t in 0..bt {
            for o in 0..cout {
                for l in 0..lo {
                    let want: f32 = (0..ck)
                        .map(|p| w[o * ck + p] * col[t * ck * lo + p * lo + l])
                        .sum();
                    assert_eq!(out[(t * cout + o) * lo + l], want);
                }
            }
        }
    }

    #[test]
    fn fallback_grid_tiles_the_output() {
        let g = Gemm::linear(100, 64, 40).expect("fits");
        let (a, cfg) = g.fallback(GemmType::F16).expect("fits");
        // cuBLAS terms: m = N = 40 rows of C, n = M = 100 columns.
        assert_eq!(cfg.grid_dim, (3, 7, 1));
        assert_eq!(cfg.block_dim, (16, 16, 1));
        assert_eq!((a.ty, a.trans_a, a.m, a.n), (1, 1, 40, 100));
        assert_eq!(std::mem::size_of::<GemmArgs>(), 64);
        assert!(Gemm::matmul(70_000, 2, 2, 2)
            .expect("fits")
            .fallback(GemmType::F32)
            .is_err());
    }

    #[test]
    fn oversized_products_are_refused() {
        assert!(Gemm::linear(1 << 31, 4, 4).is_err());
        assert!(Gemm::matmul(1, 4, 4, 1 << 31).is_err());
    }
}
