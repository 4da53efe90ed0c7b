//! Launch configurations and the by-value argument structs of the kernels: pure functions of
//! the shapes, checked against the device limits the kernels assume (no GPU needed to test).

use cudarc::driver::{DeviceRepr, LaunchConfig};

use crate::error::{CudaError, CudaResult};

/// Dimensions a strided kernel handles (`ARIA_MAX_RANK` in `common.cuh`).
pub const MAX_RANK: usize = 6;
/// Threads per block of the elementwise kernels.
pub const ELEMWISE_BLOCK: u32 = 256;
/// Blocks of a grid-stride loop (enough to fill any current GPU several times over).
pub const MAX_GRID: u64 = 1 << 16;
/// Dynamic shared memory a kernel may use without opting in (48 KiB).
pub const MAX_SHARED: usize = 48 * 1024;
/// Queries per attention block (`ATT_BQ` in `attention.cu`: one warp each).
pub const ATTN_QUERIES: usize = 4;
/// The largest head dimension the attention kernel takes (`32 · ATT_MAXV`).
pub const ATTN_MAX_DIM: usize = 256;
/// The grid's y extent limit (attention puts batch·heads there).
pub const MAX_GRID_Y: usize = 65_535;

/// Shape and source/destination strides (elements) of a strided kernel (`Strides6`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Strides6 {
    /// Number of dimensions used.
    pub rank: u32,
    pad: u32,
    /// The shape iterated.
    pub shape: [u64; MAX_RANK],
    /// Strides of the source (or the first operand).
    pub src: [i64; MAX_RANK],
    /// Strides of the destination (or the second operand).
    pub dst: [i64; MAX_RANK],
}

// SAFETY: `repr(C)` plain integers, laid out as `struct Strides6` in `common.cuh`.
unsafe impl DeviceRepr for Strides6 {}

impl Strides6 {
    /// Pack `shape` with two stride sets, dropping size-1 dimensions (they address nothing)
    /// so that up to [`MAX_RANK`] others fit.
    pub fn new(
        op: &'static str,
        shape: &[usize],
        src: &[usize],
        dst: &[usize],
    ) -> CudaResult<Self> {
        let mut s = Strides6 {
            rank: 0,
            pad: 0,
            shape: [1; MAX_RANK],
            src: [0; MAX_RANK],
            dst: [0; MAX_RANK],
        };
        let keep: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] != 1).collect();
        if keep.len() > MAX_RANK {
            return Err(CudaError::Limit {
                op,
                reason: format!("{} dimensions {shape:?} exceed {MAX_RANK}", keep.len()),
            });
        }
        let to_i = |v: usize| i64::try_from(v).map_err(|_| limit(op, "stride beyond i64"));
        for (slot, &i) in keep.iter().enumerate() {
            s.shape[slot] = shape[i] as u64;
            s.src[slot] = to_i(src[i])?;
            s.dst[slot] = to_i(dst[i])?;
        }
        s.rank = keep.len() as u32;
        Ok(s)
    }
}

/// The by-value arguments of `flash_attn_f32` (`struct AttnArgs` in `attention.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnArgs {
    /// Batch.
    pub b: u64,
    /// Heads.
    pub h: u64,
    /// Queries.
    pub nq: u64,
    /// Keys.
    pub nk: u64,
    /// Query/key head dimension.
    pub d: u64,
    /// Value head dimension.
    pub dv: u64,
    /// Score scale.
    pub scale: f32,
    /// Soft cap (0: none).
    pub softcap: f32,
    /// 0: masked keys add zero values; 1: masked keys are excluded.
    pub mask_mode: i32,
    /// Non-zero: banded by `wl`, `wr`.
    pub banded: i32,
    /// Keys to the left a query sees.
    pub wl: u64,
    /// Keys to the right a query sees.
    pub wr: u64,
    /// Chunk length of chunked attention (0: none).
    pub chunk: u64,
    /// Keys per shared-memory tile (≤ 32).
    pub tk: u64,
}

// SAFETY: `repr(C)` plain numbers laid out as `struct AttnArgs` in `attention.cu` (six u64,
// two f32, two i32, four u64: no padding on any ABI CUDA supports).
unsafe impl DeviceRepr for AttnArgs {}

fn limit(op: &'static str, reason: impl Into<String>) -> CudaError {
    CudaError::Limit {
        op,
        reason: reason.into(),
    }
}

/// A grid-stride launch over `n` elements.
pub fn elementwise(n: usize) -> LaunchConfig {
    let blocks = (n as u64)
        .div_ceil(u64::from(ELEMWISE_BLOCK))
        .clamp(1, MAX_GRID);
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (ELEMWISE_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One block per row of `d` elements: a power of two of threads between 32 and 1024.
pub fn rows(op: &'static str, rows: usize, d: usize) -> CudaResult<LaunchConfig> {
    if rows > i32::MAX as usize {
        return Err(limit(op, format!("{rows} rows exceed one grid")));
    }
    let threads = d.next_power_of_two().clamp(32, 1024) as u32;
    Ok(LaunchConfig {
        grid_dim: (rows.max(1) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// `split_heads_f32`: one block per head vector, `d` floats of dynamic shared memory.
pub fn split_heads(vectors: usize, d: usize) -> CudaResult<LaunchConfig> {
    let mut cfg = rows("split_heads", vectors, d)?;
    let bytes = d * 4;
    if bytes > MAX_SHARED {
        return Err(limit(
            "split_heads",
            format!("head_dim {d} exceeds shared memory"),
        ));
    }
    cfg.shared_mem_bytes = bytes as u32;
    Ok(cfg)
}

/// Shared memory of `flash_attn_f32` for key tiles of `tk`.
pub fn attention_shared(d: usize, dv: usize, diff: bool, tk: usize) -> usize {
    let halves = if diff { 2 } else { 1 };
    4 * (ATTN_QUERIES * d * halves + tk * d * halves + tk * dv)
}

/// The launch of `flash_attn_f32` and its key tile: the largest of 32, 16, 8 keys whose tiles
/// fit in shared memory.
pub fn attention(
    bh: usize,
    nq: usize,
    d: usize,
    dv: usize,
    diff: bool,
) -> CudaResult<(LaunchConfig, usize)> {
    if d > ATTN_MAX_DIM || dv > ATTN_MAX_DIM {
        return Err(limit(
            "attention",
            format!("head dims {d}/{dv} exceed {ATTN_MAX_DIM}"),
        ));
    }
    if bh > MAX_GRID_Y {
        return Err(limit(
            "attention",
            format!("{bh} batch·heads exceed {MAX_GRID_Y}"),
        ));
    }
    let blocks = nq.div_ceil(ATTN_QUERIES);
    if blocks > i32::MAX as usize {
        return Err(limit("attention", format!("{nq} queries exceed one grid")));
    }
    let tk = [32, 16, 8]
        .into_iter()
        .find(|&tk| attention_shared(d, dv, diff, tk) <= MAX_SHARED)
        .ok_or_else(|| {
            limit(
                "attention",
                format!("head dims {d}/{dv} exceed shared memory"),
            )
        })?;
    Ok((
        LaunchConfig {
            grid_dim: (blocks.max(1) as u32, bh.max(1) as u32, 1),
            block_dim: (32 * ATTN_QUERIES as u32, 1, 1),
            shared_mem_bytes: attention_shared(d, dv, diff, tk) as u32,
        },
        tk,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elementwise_grid_covers_and_caps() {
        assert_eq!(elementwise(0).grid_dim.0, 1);
        assert_eq!(elementwise(256).grid_dim.0, 1);
        assert_eq!(elementwise(257).grid_dim.0, 2);
        assert_eq!(elementwise(usize::MAX / 2).grid_dim.0 as u64, MAX_GRID);
    }

    #[test]
    fn row_blocks_are_warp_multiples() {
        for d in [1, 31, 33, 100, 1024, 5000] {
            let c = rows("t", 7, d).expect("fits");
            assert_eq!(c.grid_dim.0, 7);
            assert!(
                c.block_dim.0.is_multiple_of(32) && (32..=1024).contains(&c.block_dim.0),
                "{d}"
            );
            assert!(c.block_dim.0 as usize >= d.min(1024));
        }
    }

    #[test]
    fn attention_tile_shrinks_to_fit_shared_memory() {
        let (c, tk) = attention(16, 1000, 64, 64, false).expect("fits");
        assert_eq!((c.grid_dim, c.block_dim.0, tk), ((250, 16, 1), 128, 32));
        assert!(c.shared_mem_bytes as usize <= MAX_SHARED);
        // Differential attention at head_dim 128 needs the smaller tile.
        let (c, tk) = attention(8, 3, 128, 128, true).expect("fits");
        assert_eq!((c.grid_dim.0, tk), (1, 16));
        assert!(c.shared_mem_bytes as usize <= MAX_SHARED);
        assert!(attention(1, 1, 257, 64, false).is_err());
        assert!(attention(MAX_GRID_Y + 1, 1, 64, 64, false).is_err());
    }

    #[test]
    fn strides_drop_unit_dims_and_limit_rank() {
        let s = Strides6::new("t", &[2, 1, 3], &[3, 3, 1], &[0, 0, 1]).expect("fits");
        assert_eq!(s.rank, 2);
        assert_eq!(&s.shape[..2], &[2, 3]);
        assert_eq!(&s.src[..2], &[3, 1]);
        assert_eq!(&s.dst[..2], &[0, 1]);
        let big = [2usize; 7];
        assert!(Strides6::new("t", &big, &big, &big).is_err());
        // The layout the kernels read: 8 bytes of header, then three arrays of six words.
        assert_eq!(std::mem::size_of::<Strides6>(), 8 + 3 * 8 * MAX_RANK);
        assert_eq!(std::mem::size_of::<AttnArgs>(), 96);
    }
}
