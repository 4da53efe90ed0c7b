//! Tensor storage: owned CPU vectors, memory-mapped file regions, or device buffers.

use std::any::Any;
use std::sync::Arc;

use half::{bf16, f16};
use memmap2::Mmap;

use crate::backend::Backend;
use crate::{DType, Elem};

/// Storage that lives on a device (wgpu, CUDA...). Implemented by device backends; model code
/// never sees it: it only moves [`Tensor`](crate::Tensor)s through the op set.
pub trait DeviceStorage: Send + Sync + std::fmt::Debug {
    /// The backend that owns the buffer and runs ops on it.
    fn backend(&self) -> Arc<dyn Backend>;
    /// Number of bytes held.
    fn len_bytes(&self) -> usize;
    /// For backends to downcast to their own buffer type.
    fn as_any(&self) -> &dyn Any;
}

/// Owned, typed CPU data (always correctly aligned).
#[derive(Debug, Clone)]
pub enum CpuData {
    /// f32 elements.
    F32(Vec<f32>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// i8 elements.
    I8(Vec<i8>),
    /// u8 elements.
    U8(Vec<u8>),
    /// i64 elements.
    I64(Vec<i64>),
}

impl CpuData {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            CpuData::F32(_) => DType::F32,
            CpuData::F16(_) => DType::F16,
            CpuData::BF16(_) => DType::BF16,
            CpuData::I8(_) => DType::I8,
            CpuData::U8(_) => DType::U8,
            CpuData::I64(_) => DType::I64,
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            CpuData::F32(v) => bytemuck::cast_slice(v),
            CpuData::F16(v) => bytemuck::cast_slice(v),
            CpuData::BF16(v) => bytemuck::cast_slice(v),
            CpuData::I8(v) => bytemuck::cast_slice(v),
            CpuData::U8(v) => v,
            CpuData::I64(v) => bytemuck::cast_slice(v),
        }
    }

    /// Wrap a typed vector.
    pub fn from_vec<T: Elem>(v: Vec<T>) -> CpuData {
        // Every Elem is one of the six types; the casts below are identity conversions that
        // bytemuck checks at run time (same size and alignment), so they cannot fail.
        match T::DTYPE {
            DType::F32 => CpuData::F32(cast_vec(v)),
            DType::F16 => CpuData::F16(cast_vec(v)),
            DType::BF16 => CpuData::BF16(cast_vec(v)),
            DType::I8 => CpuData::I8(cast_vec(v)),
            DType::U8 => CpuData::U8(cast_vec(v)),
            DType::I64 => CpuData::I64(cast_vec(v)),
        }
    }
}

fn cast_vec<A: bytemuck::Pod, B: bytemuck::Pod>(v: Vec<A>) -> Vec<B> {
    match bytemuck::allocation::try_cast_vec(v) {
        Ok(b) => b,
        // Only reachable if A and B differ in size/alignment, which `from_vec` never asks for.
        Err((_, v)) => bytemuck::allocation::pod_collect_to_vec(&v),
    }
}

/// Where a tensor's bytes live.
#[derive(Debug)]
pub enum Storage {
    /// Owned CPU memory.
    Cpu(CpuData),
    /// A region of a memory-mapped file (weights used without copying). The region is aligned
    /// for its dtype: the loader copies misaligned tensors into [`Storage::Cpu`] instead.
    Mapped {
        /// The mapping (kept alive by every tensor that views it).
        map: Arc<Mmap>,
        /// Byte offset of the region.
        start: usize,
        /// Byte length of the region.
        len: usize,
        /// Element type of the region.
        dtype: DType,
        /// Whether `map` maps a file, so that its pages can be dropped and read back from it
        /// ([`Storage::release_pages`]); `false` for an anonymous mapping.
        file_backed: bool,
    },
    /// A device buffer.
    Device(Arc<dyn DeviceStorage>),
}

impl Storage {
    /// The CPU bytes, if the storage is on the CPU (owned or mapped).
    pub fn cpu_bytes(&self) -> Option<&[u8]> {
        match self {
            Storage::Cpu(d) => Some(d.bytes()),
            Storage::Mapped {
                map, start, len, ..
            } => map.get(*start..start.checked_add(*len)?),
            Storage::Device(_) => None,
        }
    }

    /// Whether the storage is a memory-mapped file region.
    pub fn is_mapped(&self) -> bool {
        matches!(self, Storage::Mapped { .. })
    }

    /// Drop this process's resident pages of a file-backed mapped region
    /// (`madvise(MADV_DONTNEED)` on the whole pages inside it): the resident set shrinks at
    /// once, and the next access reads the same bytes from the file again (from the page
    /// cache when it still holds them). Every tensor viewing the region stays valid. Returns
    /// the bytes released: 0 for owned, device and anonymous mapped storage, and on platforms
    /// without `madvise`.
    pub fn release_pages(&self) -> crate::Result<usize> {
        match self {
            Storage::Mapped {
                map,
                start,
                len,
                file_backed: true,
                ..
            } => release_range(map, *start, start.saturating_add(*len)),
            _ => Ok(0),
        }
    }
}

/// Page size assumed when rounding a release to whole pages (the largest base page of the
/// supported platforms; a smaller real page only leaves a few more pages resident).
const RELEASE_PAGE: usize = 16 * 1024;

/// Drop the resident pages of the whole pages inside `[start, end)` of `map`, which must be a
/// read-only mapping of a file (not an anonymous one: its pages would read back as zeros).
#[cfg(unix)]
pub fn release_range(map: &Mmap, start: usize, end: usize) -> crate::Result<usize> {
    let base = map.as_ptr() as usize;
    // Only whole pages inside [start, end): neighbouring tensors keep theirs.
    let first = (base + start).div_ceil(RELEASE_PAGE) * RELEASE_PAGE - base;
    let last = ((base + end) / RELEASE_PAGE * RELEASE_PAGE).saturating_sub(base);
    if last <= first || last > map.len() {
        return Ok(0);
    }
    // SAFETY: callers pass read-only mappings of files only (`file_backed`), and aria never
    // writes through them, so MADV_DONTNEED only drops the process's copies of clean file
    // pages: any later read of these bytes, through a tensor still viewing them or otherwise,
    // faults the same bytes in from the file again. No reference ever observes different
    // contents. The range lies inside the mapping (checked above).
    unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first) }
        .map_err(|e| crate::CoreError::Invalid(format!("madvise(MADV_DONTNEED) failed: {e}")))?;
    Ok(last - first)
}

#[cfg(not(unix))]
pub fn release_range(_map: &Mmap, _start: usize, _end: usize) -> crate::Result<usize> {
    Ok(0)
}
