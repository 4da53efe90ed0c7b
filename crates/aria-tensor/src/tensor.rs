//! The [`Tensor`] type: a shape, strides and a shared [`Storage`].

use std::sync::Arc;

use half::{bf16, f16, slice::HalfFloatSliceExt};

use crate::backend::{Device, Op};
use crate::storage::{CpuData, Storage};
use crate::{CoreError, DType, Elem, Result};

/// An n-dimensional array. Cloning is cheap (the storage is shared); views (`narrow`,
/// `transpose`, `reshape` of contiguous data) share storage too.
#[derive(Clone)]
pub struct Tensor {
    storage: Arc<Storage>,
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({:?}, {:?}, {})",
            self.shape,
            self.dtype,
            match &*self.storage {
                Storage::Cpu(_) => "cpu",
                Storage::Mapped { .. } => "mapped",
                Storage::Device(_) => "device",
            }
        )
    }
}

/// Row-major strides for a shape.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut s = 1;
    for i in (0..shape.len()).rev() {
        strides[i] = s;
        s *= shape[i];
    }
    strides
}

impl Tensor {
    /// Build a tensor from storage and a layout. Checks that every element the layout reaches
    /// lies inside the storage and, for CPU storage, that `dtype` is its element type.
    pub fn from_storage(
        storage: Arc<Storage>,
        dtype: DType,
        shape: Vec<usize>,
        strides: Vec<usize>,
        offset: usize,
    ) -> Result<Tensor> {
        if shape.len() != strides.len() {
            return Err(CoreError::shape(
                "from_storage",
                format!("{} strides for {} dimensions", strides.len(), shape.len()),
                &[&shape],
            ));
        }
        let stored = match &*storage {
            Storage::Cpu(d) => Some(d.dtype()),
            Storage::Mapped { dtype, .. } => Some(*dtype),
            Storage::Device(_) => None,
        };
        if let Some(stored) = stored.filter(|&d| d != dtype) {
            return Err(CoreError::DType {
                op: "from_storage",
                dtype,
                reason: format!("the storage holds {stored}"),
            });
        }
        let t = Tensor {
            storage,
            dtype,
            shape,
            strides,
            offset,
        };
        let len_bytes = match &*t.storage {
            Storage::Device(d) => d.len_bytes(),
            _ => t.storage.cpu_bytes().map_or(0, <[u8]>::len),
        };
        let n = len_bytes / dtype.size();
        let count = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        let reach = match count {
            Some(0) => Some(0),
            Some(_) => t.max_index().and_then(|m| m.checked_add(1)),
            None => None,
        };
        if reach.is_none_or(|r| r > n) {
            return Err(CoreError::shape(
                "from_storage",
                format!(
                    "layout (strides {:?}, offset {}) reaches past the {n} stored elements",
                    t.strides, t.offset
                ),
                &[&t.shape],
            ));
        }
        Ok(t)
    }

    /// Storage index of the last element (for a non-empty tensor); `None` on overflow.
    fn max_index(&self) -> Option<usize> {
        self.shape
            .iter()
            .zip(&self.strides)
            .try_fold(self.offset, |acc, (&d, &s)| {
                d.saturating_sub(1)
                    .checked_mul(s)
                    .and_then(|v| acc.checked_add(v))
            })
    }

    /// A contiguous CPU tensor owning `data`.
    pub fn from_vec<T: Elem>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(CoreError::shape(
                "from_vec",
                format!("{} elements for a shape of {n}", data.len()),
                &[shape],
            ));
        }
        Ok(Tensor {
            storage: Arc::new(Storage::Cpu(CpuData::from_vec(data))),
            dtype: T::DTYPE,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        })
    }

    /// A contiguous CPU tensor copied from `data`.
    pub fn from_slice<T: Elem>(data: &[T], shape: &[usize]) -> Result<Tensor> {
        Self::from_vec(data.to_vec(), shape)
    }

    /// A zero-filled contiguous CPU tensor.
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        let data = match dtype {
            DType::F32 => CpuData::F32(vec![0.0; n]),
            DType::F16 => CpuData::F16(vec![f16::ZERO; n]),
            DType::BF16 => CpuData::BF16(vec![bf16::ZERO; n]),
            DType::I8 => CpuData::I8(vec![0; n]),
            DType::U8 => CpuData::U8(vec![0; n]),
            DType::I64 => CpuData::I64(vec![0; n]),
        };
        Tensor {
            storage: Arc::new(Storage::Cpu(data)),
            dtype,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// An f32 tensor filled with `v`.
    pub fn full(shape: &[usize], v: f32) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor {
            storage: Arc::new(Storage::Cpu(CpuData::F32(vec![v; n]))),
            dtype: DType::F32,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The shape (alias of [`Tensor::shape`]).
    pub fn dims(&self) -> &[usize] {
        &self.shape
    }

    /// The strides, in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Offset of the first element in the storage, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Size of dimension `d`; negative-free: errors if `d` is out of range.
    pub fn dim(&self, d: usize) -> Result<usize> {
        self.shape
            .get(d)
            .copied()
            .ok_or_else(|| CoreError::shape("dim", format!("no dimension {d}"), &[&self.shape]))
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.shape.iter().product()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The storage (shared with every view of it).
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The device the tensor lives on.
    pub fn device(&self) -> Device {
        match &*self.storage {
            Storage::Device(d) => Device::Backend(d.backend()),
            _ => Device::Cpu,
        }
    }

    /// Whether the tensor's data lives in a memory-mapped file (no copy was made).
    pub fn is_mapped(&self) -> bool {
        self.storage.is_mapped()
    }

    /// Drop the resident pages of the memory-mapped file region this tensor views (see
    /// [`Storage::release_pages`]): for weights not needed for a while (a text encoder once
    /// the prompt is encoded), which read back from the file on their next use. The tensor
    /// stays valid. Returns the bytes released (0 unless the storage is a file mapping).
    pub fn release_pages(&self) -> Result<usize> {
        self.storage.release_pages()
    }

    /// Whether elements are laid out row-major without gaps (always true for zero elements).
    pub fn is_contiguous(&self) -> bool {
        if self.elem_count() == 0 {
            return true;
        }
        let mut s = 1;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != s {
                return false;
            }
            s *= self.shape[i];
        }
        true
    }

    /// The elements as a slice: the tensor must be on the CPU, contiguous, and of dtype `T`.
    pub fn as_slice<T: Elem>(&self) -> Result<&[T]> {
        if self.dtype != T::DTYPE {
            return Err(CoreError::DType {
                op: "as_slice",
                dtype: self.dtype,
                reason: format!("{} requested", T::DTYPE),
            });
        }
        if !self.is_contiguous() {
            return Err(CoreError::shape(
                "as_slice",
                "tensor is not contiguous",
                &[&self.shape],
            ));
        }
        if self.elem_count() == 0 && self.device().is_cpu() {
            return Ok(&[]);
        }
        let bytes = self
            .storage
            .cpu_bytes()
            .ok_or_else(|| CoreError::Unsupported {
                op: "as_slice",
                backend: "device".into(),
            })?;
        let all: &[T] = bytemuck::try_cast_slice(bytes).map_err(|e| {
            CoreError::Invalid(format!(
                "as_slice: storage not viewable as {}: {e}",
                T::DTYPE
            ))
        })?;
        all.get(self.offset..self.offset + self.elem_count())
            .ok_or_else(|| CoreError::shape("as_slice", "layout exceeds storage", &[&self.shape]))
    }

    /// The raw bytes of a contiguous CPU tensor.
    pub fn as_bytes(&self) -> Result<&[u8]> {
        if !self.is_contiguous() {
            return Err(CoreError::shape(
                "as_bytes",
                "tensor is not contiguous",
                &[&self.shape],
            ));
        }
        if self.elem_count() == 0 && self.device().is_cpu() {
            return Ok(&[]);
        }
        let bytes = self
            .storage
            .cpu_bytes()
            .ok_or_else(|| CoreError::Unsupported {
                op: "as_bytes",
                backend: "device".into(),
            })?;
        let sz = self.dtype.size();
        bytes
            .get(self.offset * sz..(self.offset + self.elem_count()) * sz)
            .ok_or_else(|| CoreError::shape("as_bytes", "layout exceeds storage", &[&self.shape]))
    }

    /// The elements in row-major order, read through the layout from `all` (the storage): runs
    /// of the last dimension are copied whole when it is contiguous (a transposed head layout,
    /// a narrowed row), element by element otherwise.
    fn gather<T: Copy>(&self, all: &[T]) -> Vec<T> {
        let n = self.elem_count();
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return out;
        }
        let rank = self.shape.len();
        if rank == 0 {
            out.push(all[self.offset]);
            return out;
        }
        let (inner, is) = (self.shape[rank - 1], self.strides[rank - 1]);
        let mut idx = vec![0usize; rank - 1];
        let mut pos = self.offset;
        for _ in 0..n / inner {
            if is == 1 {
                out.extend_from_slice(&all[pos..pos + inner]);
            } else {
                out.extend((0..inner).map(|j| all[pos + j * is]));
            }
            for d in (0..rank - 1).rev() {
                idx[d] += 1;
                pos += self.strides[d];
                if idx[d] < self.shape[d] {
                    break;
                }
                pos -= self.strides[d] * self.shape[d];
                idx[d] = 0;
            }
        }
        out
    }

    fn cpu_elems<T: Elem>(&self) -> Result<&[T]> {
        let bytes = self
            .storage
            .cpu_bytes()
            .ok_or_else(|| CoreError::Unsupported {
                op: "to_cpu",
                backend: "device".into(),
            })?;
        bytemuck::try_cast_slice(bytes)
            .map_err(|e| CoreError::Invalid(format!("storage not viewable as {}: {e}", T::DTYPE)))
    }

    /// Copy out the elements (row-major) as `T`, which must be the tensor's dtype. Device
    /// tensors are downloaded first.
    pub fn to_vec<T: Elem>(&self) -> Result<Vec<T>> {
        if self.dtype != T::DTYPE {
            return Err(CoreError::DType {
                op: "to_vec",
                dtype: self.dtype,
                reason: format!("{} requested", T::DTYPE),
            });
        }
        if let Device::Backend(b) = self.device() {
            return b.to_cpu(self)?.to_vec::<T>();
        }
        if self.is_contiguous() {
            return Ok(self.as_slice::<T>()?.to_vec());
        }
        let all = self.cpu_elems::<T>()?;
        Ok(self.gather(all))
    }

    /// Copy out the elements (row-major) converted to f32, whatever the dtype. Device tensors
    /// are downloaded first.
    pub fn to_vec_f32(&self) -> Result<Vec<f32>> {
        if let Device::Backend(b) = self.device() {
            return b.to_cpu(self)?.to_vec_f32();
        }
        fn conv<T: Elem>(t: &Tensor) -> Result<Vec<f32>> {
            if t.is_contiguous() {
                let s = t.as_slice::<T>()?;
                return Ok(s.iter().map(|v| v.to_f32()).collect());
            }
            let all = t.cpu_elems::<T>()?;
            Ok(t.gather(all).into_iter().map(|v| v.to_f32()).collect())
        }
        match self.dtype {
            DType::F32 => self.to_vec::<f32>(),
            DType::F16 if self.is_contiguous() => {
                let s = self.as_slice::<f16>()?;
                let mut out = vec![0f32; s.len()];
                s.convert_to_f32_slice(&mut out);
                Ok(out)
            }
            DType::BF16 if self.is_contiguous() => {
                let s = self.as_slice::<bf16>()?;
                let mut out = vec![0f32; s.len()];
                s.convert_to_f32_slice(&mut out);
                Ok(out)
            }
            DType::F16 => conv::<f16>(self),
            DType::BF16 => conv::<bf16>(self),
            DType::I8 => conv::<i8>(self),
            DType::U8 => conv::<u8>(self),
            DType::I64 => conv::<i64>(self),
        }
    }

    /// Convert to another dtype: a new contiguous tensor on the same device (a cheap clone if
    /// nothing changes). Floats round to nearest even; see [`Elem::from_f32`] for integers.
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype && self.is_contiguous() {
            return Ok(self.clone());
        }
        if dtype == self.dtype {
            return self.contiguous();
        }
        let op = Op::ToDtype {
            x: self.clone(),
            dtype,
        };
        let spec = op.check()?;
        match self.device() {
            Device::Backend(b) => crate::backend::run_checked(&*b, op, &spec),
            Device::Cpu => {
                crate::backend::check::held_to("cpu", "to_dtype", self.to_dtype_host(dtype)?, &spec)
            }
        }
    }

    /// The host conversion of [`Tensor::to_dtype`] (a host tensor's own elements, converted):
    /// what the CPU backend runs for [`Op::ToDtype`].
    pub fn to_dtype_host(&self, dtype: DType) -> Result<Tensor> {
        let v = self.to_vec_f32()?;
        match dtype {
            DType::F32 => Tensor::from_vec(v, &self.shape),
            DType::F16 => {
                let mut out = vec![f16::ZERO; v.len()];
                out.convert_from_f32_slice(&v);
                Tensor::from_vec(out, &self.shape)
            }
            DType::BF16 => {
                let mut out = vec![bf16::ZERO; v.len()];
                out.convert_from_f32_slice(&v);
                Tensor::from_vec(out, &self.shape)
            }
            DType::I8 => {
                Tensor::from_vec(v.iter().map(|&x| i8::from_f32(x)).collect(), &self.shape)
            }
            DType::U8 => {
                Tensor::from_vec(v.iter().map(|&x| u8::from_f32(x)).collect(), &self.shape)
            }
            DType::I64 => {
                Tensor::from_vec(v.iter().map(|&x| i64::from_f32(x)).collect(), &self.shape)
            }
        }
    }

    /// A contiguous version on the same device (a cheap clone if already contiguous).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let op = Op::Contiguous { x: self.clone() };
        let spec = op.check()?;
        match self.device() {
            Device::Backend(b) => crate::backend::run_checked(&*b, op, &spec),
            Device::Cpu => {
                crate::backend::check::held_to("cpu", "contiguous", self.contiguous_host()?, &spec)
            }
        }
    }

    /// The host copy of [`Tensor::contiguous`] (a host tensor's elements in row-major order):
    /// what the CPU backend runs for [`Op::Contiguous`].
    pub fn contiguous_host(&self) -> Result<Tensor> {
        match self.dtype {
            DType::F32 => Tensor::from_vec(self.to_vec::<f32>()?, &self.shape),
            DType::F16 => Tensor::from_vec(self.to_vec::<f16>()?, &self.shape),
            DType::BF16 => Tensor::from_vec(self.to_vec::<bf16>()?, &self.shape),
            DType::I8 => Tensor::from_vec(self.to_vec::<i8>()?, &self.shape),
            DType::U8 => Tensor::from_vec(self.to_vec::<u8>()?, &self.shape),
            DType::I64 => Tensor::from_vec(self.to_vec::<i64>()?, &self.shape),
        }
    }

    /// Same data, new shape (element count must match). Copies only if not contiguous.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != self.elem_count() {
            return Err(CoreError::shape(
                "reshape",
                format!("{} elements into {n}", self.elem_count()),
                &[&self.shape, shape],
            ));
        }
        let t = self.contiguous()?;
        Ok(Tensor {
            storage: t.storage,
            dtype: t.dtype,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: t.offset,
        })
    }

    /// A view of `len` entries of dimension `dim` starting at `start`.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Tensor> {
        let size = self.dim(dim)?;
        if start.checked_add(len).is_none_or(|e| e > size) {
            return Err(CoreError::shape(
                "narrow",
                format!("range {start}..{start}+{len} of dimension {dim} (size {size})"),
                &[&self.shape],
            ));
        }
        let mut t = self.clone();
        t.shape[dim] = len;
        if len > 0 {
            t.offset += start * self.strides[dim];
        }
        Ok(t)
    }

    /// A view with dimensions `d0` and `d1` swapped.
    pub fn transpose(&self, d0: usize, d1: usize) -> Result<Tensor> {
        if d0 >= self.rank() || d1 >= self.rank() {
            return Err(CoreError::shape(
                "transpose",
                format!("dims {d0},{d1}"),
                &[&self.shape],
            ));
        }
        let mut t = self.clone();
        t.shape.swap(d0, d1);
        t.strides.swap(d0, d1);
        Ok(t)
    }

    /// A view with dimensions reordered: result dimension `i` is source dimension `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let mut seen = vec![false; self.rank()];
        if perm.len() != self.rank()
            || perm
                .iter()
                .any(|&p| p >= seen.len() || std::mem::replace(&mut seen[p], true))
        {
            return Err(CoreError::shape(
                "permute",
                format!("perm {perm:?}"),
                &[&self.shape],
            ));
        }
        let mut t = self.clone();
        t.shape = perm.iter().map(|&p| self.shape[p]).collect();
        t.strides = perm.iter().map(|&p| self.strides[p]).collect();
        Ok(t)
    }

    /// Insert a dimension of size 1 at `dim`.
    pub fn unsqueeze(&self, dim: usize) -> Result<Tensor> {
        if dim > self.rank() {
            return Err(CoreError::shape(
                "unsqueeze",
                format!("dim {dim}"),
                &[&self.shape],
            ));
        }
        let mut t = self.clone();
        let st = if dim < self.rank() {
            self.strides[dim] * self.shape[dim]
        } else {
            1
        };
        t.shape.insert(dim, 1);
        t.strides.insert(dim, st);
        Ok(t)
    }

    /// Remove a dimension of size 1.
    pub fn squeeze(&self, dim: usize) -> Result<Tensor> {
        if self.dim(dim)? != 1 {
            return Err(CoreError::shape(
                "squeeze",
                format!("dim {dim} is not 1"),
                &[&self.shape],
            ));
        }
        let mut t = self.clone();
        t.shape.remove(dim);
        t.strides.remove(dim);
        Ok(t)
    }

    /// Entry `i` of the first dimension (that dimension removed).
    pub fn get(&self, i: usize) -> Result<Tensor> {
        self.narrow(0, i, 1)?.squeeze(0)
    }

    /// Concatenate tensors of one dtype along `dim` (all other dimensions equal).
    pub fn cat(tensors: &[&Tensor], dim: usize) -> Result<Tensor> {
        let spec = crate::backend::check::cat_spec(tensors, dim)?;
        let operands: Vec<Option<&Tensor>> = tensors.iter().map(|t| Some(*t)).collect();
        let op = Op::Cat {
            xs: tensors.iter().map(|t| (*t).clone()).collect(),
            dim,
        };
        match crate::backend::device_of("cat", &operands)? {
            Some(b) => crate::backend::run_checked(&*b, op, &spec),
            None => {
                crate::backend::check::held_to("cpu", "cat", Tensor::cat_host(tensors, dim)?, &spec)
            }
        }
    }

    /// The host concatenation of [`Tensor::cat`] (host tensors' elements, copied in order):
    /// what the CPU backend runs for [`Op::Cat`].
    pub fn cat_host(tensors: &[&Tensor], dim: usize) -> Result<Tensor> {
        let spec = crate::backend::check::cat_spec(tensors, dim)?;
        let shape = spec.shape;
        let outer: usize = shape[..dim].iter().product();
        fn go<T: Elem>(
            ts: &[&Tensor],
            dim: usize,
            outer: usize,
            shape: &[usize],
        ) -> Result<Tensor> {
            let parts: Vec<Vec<T>> = ts.iter().map(|t| t.to_vec::<T>()).collect::<Result<_>>()?;
            let inner: usize = shape[dim + 1..].iter().product();
            let mut out = Vec::with_capacity(shape.iter().product());
            for o in 0..outer {
                for (p, t) in parts.iter().zip(ts) {
                    let chunk = t.shape[dim] * inner;
                    out.extend_from_slice(&p[o * chunk..(o + 1) * chunk]);
                }
            }
            Tensor::from_vec(out, shape)
        }
        match spec.dtype {
            DType::F32 => go::<f32>(tensors, dim, outer, &shape),
            DType::F16 => go::<f16>(tensors, dim, outer, &shape),
            DType::BF16 => go::<bf16>(tensors, dim, outer, &shape),
            DType::I8 => go::<i8>(tensors, dim, outer, &shape),
            DType::U8 => go::<u8>(tensors, dim, outer, &shape),
            DType::I64 => go::<i64>(tensors, dim, outer, &shape),
        }
    }

    /// Stack tensors of one shape along a new dimension `dim`.
    pub fn stack(tensors: &[&Tensor], dim: usize) -> Result<Tensor> {
        let us: Vec<Tensor> = tensors
            .iter()
            .map(|t| t.unsqueeze(dim))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor> = us.iter().collect();
        Tensor::cat(&refs, dim)
    }

    /// The single element of a one-element tensor, as f32.
    pub fn to_scalar_f32(&self) -> Result<f32> {
        if self.elem_count() != 1 {
            return Err(CoreError::shape(
                "to_scalar",
                "not a single element",
                &[&self.shape],
            ));
        }
        Ok(self.to_vec_f32()?[0])
    }
}
