//! Tensor storage: owned CPU vectors, memory-mapped file regions, or device buffers.

use std::any::Any;
use std::sync::Arc;

use half::{bf16, f16};
use memmap2::Mmap;

use crate::backend::Backend;
use crate::{DType, Elem};

/// Storage that lives on a device (wgpu, CUDA...). Implemented by device backends; model code
/// never sees it: it only moves [`Tensor`](crate::Tensor)s through [`crate::ops`].
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
}
